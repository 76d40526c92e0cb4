"""vllm-gke: Pulumi components that deploy multi-node vLLM + Ray serving on GKE."""
