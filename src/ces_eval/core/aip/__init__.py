"""The AIP machinery every resource stands on: the context a core function works over, the
standard methods (AIP-131 to 135), resource names (AIP-122), list pages (AIP-158), input
validation and server-maintained stamps."""
