"""After boot: nvidia-smi parsing and the transports that run it on a box."""
