"""Every pinned version the program deploys, in one place."""

LWS_VERSION = "v0.8.0"
"""LeaderWorkerSet CRD + controller (kubernetes-sigs/lws release)."""
LWS_CHART = "oci://registry.k8s.io/lws/charts/lws"

GCLOUD_IMAGE = "gcr.io/google.com/cloudsdktool/google-cloud-cli:545.0.0-slim"
"""Runs the GCS download Job (`gcloud storage`) with Workload Identity."""

CUSTOM_METRICS_ADAPTER_IMAGE = "gcr.io/gke-release/custom-metrics-stackdriver-adapter:v0.16.1-gke.0"
"""custom-metrics-stackdriver-adapter serving custom.metrics.k8s.io / external.metrics.k8s.io."""

