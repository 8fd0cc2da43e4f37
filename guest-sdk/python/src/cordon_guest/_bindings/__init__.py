"""The bindings of the `cordon:tool/plugin` world.

componentize-py generates them here when it builds a component (see
`componentize-py.toml`); outside a component this package is empty, and `cordon_guest`
uses its native host instead.
"""
