"""kopf handlers: the only modules with kopf decorators; thin translations to the reconcilers.

Importing :mod:`strom_operator.handlers.cluster` (and the others) registers the handlers in kopf's
default registry; :mod:`strom_operator.main` does that and runs kopf.
"""
