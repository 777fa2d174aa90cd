"""Environments: the contract plugin authors implement (exported by ``minds_core``) and its machinery."""
