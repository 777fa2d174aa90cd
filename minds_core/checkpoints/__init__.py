"""What a CHECKPOINT names (``reference``), and what uses one: evaluation, samples, chat, export (``commands``)."""
