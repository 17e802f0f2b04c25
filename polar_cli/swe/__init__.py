"""SWE-Gym / SWE-bench instances: manifests, instance images, evaluation in containers, SWE-bench's grading."""
