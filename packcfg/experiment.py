"""`packcfg.Experiment`: one experiment config as a Pydantic v2 model whose validation is the lint rule engine.

`Experiment.model_validate(data)` lints `data` with the same engine, rules and messages as `packcfg lint` and
raises one `pydantic.ValidationError` listing every finding at error severity: each error's `type` is the rule
code, its `loc` the key path as written (a legacy spelling stays as written), its `msg` the lint message, and
its `ctx` the code, severity, hint and fix. No rule is written here: fields are not type-checked by Pydantic
(the engine's SC002/SC003 do that, with the interpolations, enum and builder dumps Bridge writes understood).

Validation context: `allow` (codes whose errors do not fail validation, as `packcfg launch --allow`), `profile`
("current" or "legacy"), `recipe` (a Bridge base recipe the data is merged over, as `--recipe`) and `overrides`
(Hydra overrides on top). No settings file is read: a model validates the same wherever it runs.

The fields are the sections and typed fields of `packcfg.core.schema.SECTIONS`, with Megatron Bridge's defaults
for attribute access (`exp.train.micro_batch_size` is 1 when unset); everything else is kept as an extra.
`model_dump()` dumps what was given (unset fields left out), so `model_dump(by_alias=True)` round-trips the
input. Importing this module imports Pydantic: `packcfg lint` never does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    create_model,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from packcfg.core.config import ConfigError, get_path
from packcfg.core.diagnostics import Diagnostic, Severity
from packcfg.core.schema import BRIDGE_SECTIONS, OWN_SECTIONS, SECTIONS, Nested

__all__ = ["Experiment"]

_CONTEXT_KEYS = frozenset({"allow", "profile", "recipe", "overrides"})


class _Dumped(BaseModel):
    """A section or the whole experiment: dumps what was given (unset fields left out) unless told otherwise."""

    model_config = ConfigDict(extra="allow", populate_by_name=False, protected_namespaces=())

    def model_dump(self, *, exclude_unset: bool = True, **kwargs: Any) -> dict[str, Any]:
        return super().model_dump(exclude_unset=exclude_unset, **kwargs)

    def model_dump_json(self, *, exclude_unset: bool = True, **kwargs: Any) -> str:
        return super().model_dump_json(exclude_unset=exclude_unset, **kwargs)


class _Section(_Dumped):
    target: str | None = Field(default=None, alias="_target_")


def _section_or_value(model: type[BaseModel]) -> Any:
    """A mapping becomes the section model; anything else (already an SC002 finding) is kept as given."""
    return Annotated[Union[model, Any], Field(union_mode="left_to_right")]  # noqa: UP007


def _build_sections() -> dict[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for name in ("offline_packing_specs", "dataset_kwargs", *OWN_SECTIONS, *BRIDGE_SECTIONS):
        fields: dict[str, Any] = {}
        for key, spec in SECTIONS[name].items():
            if isinstance(spec.type, Nested):
                fields[key] = (_section_or_value(models[spec.type.section]), spec.default)
            else:
                fields[key] = (Any, Field(default=spec.default))
        title = "".join(part.capitalize() for part in name.split("_")) + "Section"
        models[name] = create_model(title, __base__=_Section, __module__=__name__, **fields)
    return models


_SECTIONS = _build_sections()


def _error(d: Diagnostic, loc: tuple[str, ...], data: Any) -> InitErrorDetails:
    ctx: dict[str, Any] = {"code": d.code, "severity": d.severity.value, "path": ".".join(loc) or None}
    if d.hint:
        ctx["hint"] = d.hint
    if d.fix is not None:
        ctx["fix"] = d.fix.description
    # `{` in a message would be read as a template field by PydanticCustomError: the message goes in as one
    message = "{message}"
    ctx["message"] = d.message
    return InitErrorDetails(
        type=PydanticCustomError(d.code, message, ctx), loc=loc, input=get_path(data, loc)
    )


class _ExperimentBase(_Dumped):
    """One experiment: packcfg's `recipe`, `launch` and `dpo` plus Megatron Bridge's ConfigContainer sections,
    validated by the lint rule engine (every error finding is one error of the ValidationError)."""

    _diagnostics: list[Diagnostic] = PrivateAttr(default_factory=list)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every finding of the validation (warnings and infos too, and allowed errors), as `packcfg lint`."""
        return list(self._diagnostics)

    @model_validator(mode="wrap")
    @classmethod
    def _run_rules(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if isinstance(data, _ExperimentBase):
            return handler(data)
        if not isinstance(data, Mapping):
            raise PydanticCustomError(
                "SC002", "the config is {kind}; expected a mapping", {"kind": type(data).__name__}
            )
        context = info.context if isinstance(info.context, Mapping) else {}
        from packcfg.config_check import lint_object, written_path_of
        from packcfg.lint import engine
        from packcfg.lint.gate import normalise_codes
        from packcfg.lint.settings import Settings

        unknown_keys = sorted(set(context) - _CONTEXT_KEYS)
        if unknown_keys:
            raise ValueError(
                f"unknown validation context key {unknown_keys[0]!r}; known: {sorted(_CONTEXT_KEYS)}"
            )
        allow = normalise_codes(_codes(context.get("allow", ())))
        unknown = [c for c in allow if c not in engine.rules()]
        if unknown:
            raise ValueError(f"allow: unknown rule code {', '.join(unknown)}")
        profile = context.get("profile") or "current"
        try:
            settings = Settings().with_cli(profile=profile)
            diagnostics, located = lint_object(
                data,
                recipe=context.get("recipe"),
                overrides=list(context.get("overrides", ())),
                settings=settings,
            )
        except ConfigError as exc:  # not config data, a bad override or base recipe: one line, no traceback
            raise PydanticCustomError("SC001", "{message}", {"message": str(exc)}) from None
        errors = [
            _error(d, written_path_of(d, located), data)
            for d in diagnostics
            if d.severity == Severity.ERROR and d.code.upper() not in allow
        ]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        model = handler(data)
        model._diagnostics = diagnostics
        return model


def _codes(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _fields() -> dict[str, Any]:
    fields: dict[str, Any] = {
        name: (_section_or_value(_SECTIONS[name]), None) for name in (*OWN_SECTIONS, *BRIDGE_SECTIONS)
    }
    fields["peft"] = (Any, None)
    return fields


Experiment = create_model(  # the sections come from the one table, schema.SECTIONS
    "Experiment",
    __base__=_ExperimentBase,
    __module__=__name__,
    __doc__=_ExperimentBase.__doc__,
    **_fields(),
)
