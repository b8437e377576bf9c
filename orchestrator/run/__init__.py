"""`orch run`: run a training job on a provisioned box, with checkpoints kept in object storage."""
