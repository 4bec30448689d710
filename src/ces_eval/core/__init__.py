"""The protocol-independent core: rules shared by the gRPC, REST/JSON and MCP front ends.

:mod:`.service` is the facade the surfaces use: every implemented RPC by name, bound to one
:class:`~.context.Context` (storage, page tokens, operation runner, export root). Behind it, one
module per resource or service: :mod:`.evaluations` and :mod:`.results` declare their resources
and get their standard methods from :mod:`.standard` (AIP-131..135, written once);
:mod:`.exports`, :mod:`.longrunning` (google.longrunning.Operations) and :mod:`.emulator` hold the
rest. :mod:`.exchange` is the export document and the gs:// object store; :mod:`.names`,
:mod:`.pages`, :mod:`.stamps` and the validation modules are what every method uses.
"""
