"""The contract between minds and its plugins: the hooks (hookspecs), the typed protocol of each part a hook
registers (parts, CustomLoss included), an episode's types (environment), rubrics, the plugin manager and its checked
registry (plugins, plugin_errors), what an environment id points to (locate) and the check of every name a config
uses (names). It stands on config and the base floor only; the public face (``minds_core``) re-exports it."""
