"""The contract, read once from the generated descriptors: services and HTTP rules
(:mod:`~ces_eval.contract.schema`), the rules' path templates, parsed once and shared by the
router, OpenAPI, authorization and the request log (:mod:`~ces_eval.contract.templates`), their
comments (:mod:`~ces_eval.contract.comments`), field behaviours and update masks
(:mod:`~ces_eval.contract.fields`), the request limits (:mod:`~ces_eval.contract.limits`), what
proto3 JSON can render (:mod:`~ces_eval.contract.json_safe`), the one validation plan per message
type that applies them all in a single walk (:mod:`~ces_eval.contract.checks`), and the documents
built from them: JSON Schemas (:mod:`~ces_eval.contract.jsonschema`) and OpenAPI
(:mod:`~ces_eval.contract.openapi`).

Everything that depends on the API's shape starts here (docs/architecture.md). It imports no
surface, no core and no storage: they all import it.
"""
