"""One door to the service for every command (service: ServiceLifetime) and a run's session over it (session:
the environments, the policy's samplers, the rollout executor and the sinks of one run)."""
