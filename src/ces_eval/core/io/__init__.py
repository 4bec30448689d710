"""The core's I/O, implemented apart from it: the background operation runner and the object
store behind ``gs://`` URIs. The core reaches them through the Protocols in
:mod:`ces_eval.core.aip.ports`; only the service's assembly (:mod:`ces_eval.core.service`)
imports this package."""
