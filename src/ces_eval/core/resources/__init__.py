"""The resources: one declaration each over the standard methods, and what is truly its own
(its rules, defaults and custom methods)."""
