import pytest
from toy_tables import make_dataset


@pytest.fixture()
def env(tmp_path):
    """A toy dataset folder, an index folder and a results folder."""
    data = make_dataset(tmp_path / "data" / "toyset")
    return {"data": data, "save": tmp_path / "index", "out": tmp_path / "results", "tmp": tmp_path}
