"""The flat view of the configuration: :class:`HippoConfig`, which holds the nine sections
(:mod:`.sections`), reads and takes their fields by flat name (``config.damping`` is
``config.ppr.damping``; ``HippoConfig(damping=0.3)``), and reports a validation error by flat name."""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from hippo_engine.config.sections import SECTIONS, PPRConfig, _Section, _shown, builtin_defaults
from hippo_engine.errors import ConfigError

#: flat names that differ from the section's field name (kept for the flat API)
_ALIASES = {"llm": "llm_", "embedding": "embedding_"}
_UNPREFIXED = {"temperature", "max_new_tokens", "extra"}
#: the ``ppr`` section's fields were the retrieval section's: in the flat order (``to_dict``, reprs, error
#: messages) each group stays after the retrieval field it followed there
_PLACED_AFTER = {"qa_top_k": ("damping",), "query_instruction_passage": tuple(PPRConfig.model_fields)[1:]}
#: sections whose validation errors are reported together with the section before them (one message, in the
#: flat order), as when they were one section
_REPORTED_WITH_PREVIOUS = {"ppr"}


def _flat_names() -> dict[str, tuple[str, str]]:
    """Flat name -> (section, field name), in the flat order."""
    out: dict[str, tuple[str, str]] = {}
    for sec, cls in SECTIONS.items():
        for f in cls.model_fields:
            prefix = _ALIASES.get(sec, "")
            flat = f if (not prefix or f in _UNPREFIXED) else prefix + f
            out[flat] = (sec, f)        # a field placed earlier keeps its place
            for moved in _PLACED_AFTER.get(flat, ()):
                out[moved] = ("ppr", moved)
    return out


FLAT_FIELDS = _flat_names()


def _error(errors: list) -> ConfigError:
    """One message naming each error's flat field, in the flat order (``errors``: pydantic's error dicts)."""
    parts = []
    order = {f: i for i, (_, f) in enumerate(FLAT_FIELDS.values())}
    for err in sorted(errors, key=lambda err: order.get(str(err["loc"][0]) if err["loc"] else "", -1)):
        loc = [str(x) for x in err["loc"] if not str(x).startswith(("function-", "literal"))]
        name = loc[0] if loc else ""
        flat = next((k for k, (_, f) in FLAT_FIELDS.items() if f == name), name)
        shown = _shown(name, err.get("input"))
        parts.append(f"{flat}: {err['msg']} (got {shown!r})" if flat else err["msg"])
    return ConfigError("; ".join(parts))


class HippoConfig:
    """All settings of the engine, grouped and immutable, with the paper's defaults.

    ``HippoConfig(damping=0.3, use_filter=False)`` takes flat field names (see ``FLAT_FIELDS``);
    ``HippoConfig(retrieval=RetrievalConfig(...))`` takes whole sections. Read a value flat
    (``cfg.damping``) or by section (``cfg.ppr.damping``). ``replace`` returns a changed copy.
    """

    __slots__ = tuple(SECTIONS)

    def __init__(self, **values: Any):
        per: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        given: dict[str, _Section] = {}
        unknown = []
        for name, v in values.items():
            if name in SECTIONS:
                if not isinstance(v, SECTIONS[name]):
                    raise ConfigError(f"{name} must be a {SECTIONS[name].__name__}, got {type(v).__name__}")
                given[name] = v
            elif name in FLAT_FIELDS:
                sec, f = FLAT_FIELDS[name]
                per[sec][f] = v
            else:
                unknown.append(name)
        if unknown:
            raise ConfigError(f"unknown HippoConfig field(s): {', '.join(sorted(unknown))}; "
                              f"known fields: {', '.join(sorted(FLAT_FIELDS))}")
        errors: list = []
        names = list(SECTIONS)
        for i, (sec, cls) in enumerate(SECTIONS.items()):
            try:
                if sec in given:   # validate the changed values (never dump an unvalidated copy)
                    obj = cls(**{**given[sec].model_dump(), **per[sec]}) if per[sec] else given[sec]
                else:
                    obj = cls(**per[sec])
                object.__setattr__(self, sec, obj)
            except ValidationError as e:
                errors += e.errors()
            joined = i + 1 < len(names) and names[i + 1] in _REPORTED_WITH_PREVIOUS
            if errors and not joined:
                raise _error(errors) from None

    # ------------------------------------------------------------------ access
    def __getattr__(self, name: str) -> Any:
        hit = FLAT_FIELDS.get(name)
        if hit is None:
            raise AttributeError(f"HippoConfig has no field {name!r}")
        return getattr(object.__getattribute__(self, hit[0]), hit[1])

    def __setattr__(self, name: str, value: Any) -> None:
        raise ConfigError(f"HippoConfig is immutable; use config.replace({name}=...) for a changed copy")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HippoConfig) and all(getattr(self, s) == getattr(other, s) for s in SECTIONS)

    def __hash__(self) -> int:
        return hash(tuple(sorted(((k, repr(v)) for k, v in self.to_dict().items()))))

    def __repr__(self) -> str:
        changed = {k: _shown(FLAT_FIELDS[k][1], v) for k, v in self.to_dict().items() if v != _DEFAULTS.get(k)}
        return f"HippoConfig({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    def replace(self, **overrides: Any) -> HippoConfig:
        """A validated copy with some fields changed (flat names or whole sections)."""
        values: dict[str, Any] = {s: getattr(self, s) for s in SECTIONS if s not in overrides}
        values.update(overrides)
        return HippoConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        """Every field, flat."""
        return {flat: getattr(getattr(self, sec), f) for flat, (sec, f) in FLAT_FIELDS.items()}

_DEFAULTS = builtin_defaults(lambda: HippoConfig().to_dict())
