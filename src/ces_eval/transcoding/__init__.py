"""REST/JSON transcoding of the gRPC API (google/api/http.proto HttpRule, AIP-127).

Path templates (``templates``) and query parameters (``query``) turn an HTTP request into the
request message that the service core receives, the way Google's front ends do.
"""
