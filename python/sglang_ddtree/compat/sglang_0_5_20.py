"""Adapter of the SGLang 0.5.20 family (0.5.20): ``ServerArgs`` is a msgspec Struct, sealed during resolution.

``ServerArgs`` is assembled by ``msgspec.defstruct`` from the field classes of ``arg_groups/fields/``; a record's
fields keep the operator's input for good (writes during and after resolution raise) and every decision lives in
its declaration stash, which the config bags (``get_spec()``, ...) and ``resolved_view`` read. So:

- DDTREE's two flags are fields of a Struct subclass (a ``@dataclass`` subclass fails at import), placed in the
  ``spec`` namespace the way a field class places its fields (``_NS_BY_FIELD``), so ``get_spec()`` carries them.
- A registered algorithm's ``handle_server_args`` is handed a stand-in (``overrides.record_foreign_defaults``) whose
  plain writes upstream declares after the call: DDTREE's resolution is those writes.
- The resolved values of a record are read through ``resolved_view`` (its fields are the raw input).
- ``ServerArgs.get_model_config``, ``override`` and ``max_speculative_num_draft_tokens`` are gone (0.5.19's
  replacements stand).
"""

from __future__ import annotations

from typing import Dict

from sglang_ddtree.compat import sglang_0_5_19

NAMESPACE = "spec"  # the config bag DDTREE's fields are projected into (get_spec().speculative_ddtree_budget)


class Adapter(sglang_0_5_19.Adapter):
    family = "0.5.20"

    def server_args_record(self, cls):
        """``cls`` (``class X(ServerArgs)`` with annotated fields) is already a Struct subclass whose annotations are
        its extra fields; they join the ``spec`` namespace (``arg_utils.namespace_of`` reads ``_NS_BY_FIELD``, which
        ``server_args`` assembles for its own fields)."""
        own = {name: NAMESPACE for name in cls.__struct_fields__ if name not in cls.__mro__[1].__struct_fields__}
        cls._NS_BY_FIELD = {**cls.__mro__[1]._NS_BY_FIELD, **own}
        return cls

    def resolve_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        # ``server_args`` is record_foreign_defaults' stand-in (or, in tests, a plain object): its writes ARE the
        # declaration, made by upstream under handle_speculative_decoding.custom_algo after the call returns.
        for name, value in fields.items():
            setattr(server_args, name, value)

    def resolved(self, server_args):
        # A record (a Struct: its fields are the raw input) is read through its declarations; the stand-in a
        # resolver is handed (its writes first, then the resolving view) and plain objects are read as they are.
        import msgspec

        if not isinstance(server_args, msgspec.Struct):
            return server_args
        from sglang.srt.arg_groups.overrides import resolved_view

        return resolved_view(server_args)

    def write_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        # The drafter's private copy (worker.draft_view): its stash declares the drafter's widths, and its fields
        # are set past ServerArgs.__setattr__'s seal with the Struct's own setter (object.__setattr__ does not
        # reach a Struct's fields).
        import msgspec

        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, source, **fields)
        for name, value in fields.items():
            if isinstance(server_args, msgspec.Struct):
                msgspec.Struct.__setattr__(server_args, name, value)
            else:
                setattr(server_args, name, value)
