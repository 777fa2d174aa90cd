"""Supervised fine-tuning: chat conversations -> ``cross_entropy`` on the assistant's tokens (``loop``)."""
