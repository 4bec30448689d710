"""REST/JSON transcoding of the gRPC API (google/api/http.proto HttpRule, AIP-127), as a library.

Path templates (``templates``), the router (``router``), query parameters (``query``) and bodies
(``body``) turn an HTTP request into the request message that the service core receives, the
way Google's front ends do; ``rendering`` writes responses and ``errors`` Google's error
envelope. No server, admission or authentication here: the REST surface that uses it is
:mod:`ces_eval.surfaces.rest`.
"""
