"""A plugin that fails on import, to prove the others keep working (test fixture)."""

raise ImportError("this plugin is broken on purpose: missing_dependency is not installed")
