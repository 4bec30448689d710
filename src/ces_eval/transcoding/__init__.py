"""REST/JSON transcoding of the gRPC API (google/api/http.proto HttpRule, AIP-127), as a library.

The router (``router``, over the path templates of :mod:`ces_eval.contract.templates`), query
parameters (``query``) and bodies (``body``) turn an HTTP request into the request message that
the service core receives, the way Google's front ends do; ``rendering`` writes responses and
``errors`` Google's error envelope. No server, admission or authentication here: the REST
surface that uses it is :mod:`ces_eval.surfaces.rest`.
"""
