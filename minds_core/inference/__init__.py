"""Inference surfaces over any sampler: OpenAI, Anthropic and token-level routes, independent of HTTP.

- ``routes``: the route table and ``answer`` (path and body in, status and answer out);
- ``openai_api``, ``anthropic_api``, ``generate_api``: each protocol's requests and answers;
- ``chat``: messages to prompt tokens with the chat template, replies read with minds' parsers;
- ``sampling``: the protocol-neutral ``SamplingRequest``, ``sample`` and its ``SampledCall``;
- ``surface``: the models a server answers for, its limits and the capture hook;
- ``errors``, ``fields``: refusals in each protocol's error shape, and reading fields with them.

``minds serve`` mounts the routes over its models (``serve.served_models``); a run mounts them over
its current policy and records every call (``capture``).
"""
