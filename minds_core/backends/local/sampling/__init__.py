"""The local backend's sampling wing: the ``SamplingEngine`` and its decoding (continuous batching, KV-cache
slots, on-device sampling, CUDA graphs, compiled decode math, prompt scoring).

It imports the shared floor (``..model``) only, never ``..training``; the clients above tie the two wings.
"""
