"""Managed Prometheus scraping of the vLLM leaders and a Cloud Monitoring dashboard."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from planner import metrics as m
from planner.commands import API_PORT_NAME
from planner.config import Stack


@dataclass(frozen=True)
class MonitoringArgs:
    """Inputs of Monitoring."""

    namespace: str
    """Namespace of the serving pods."""
    leader_selector: dict[str, str]
    """Labels that select leader pods only (workers expose no vLLM metrics)."""
    port_name: str
    """Name of the leader container's API port (/metrics is served there)."""
    interval: str
    """Scrape interval, e.g. 15s."""
    project: str
    """GCP project for the dashboard."""
    dashboard: bool
    """Create the Cloud Monitoring dashboard."""
    title: str
    """Dashboard title."""
    hpa_name: str
    """HPA whose replica counts the dashboard shows."""

    @classmethod
    def from_plan(cls, stack: Stack, leader_selector: dict[str, str], hpa_name: str) -> MonitoringArgs:
        s = stack.settings
        return cls(namespace=s.serving.namespace, leader_selector=leader_selector, port_name=API_PORT_NAME,
                   interval=s.monitoring.scrape_interval, project=stack.project, dashboard=s.monitoring.dashboard,
                   title=f"vLLM {s.model.served_name} ({pulumi.get_stack()})", hpa_name=hpa_name)


def _quantiles(metric: str, selector: str) -> list[str]:
    """p50 and p95 of a histogram over 5 minutes."""
    return [f"histogram_quantile({q}, sum by (le) (rate({m.exposition_name(metric)}{selector}[5m])))"
            for q in (0.5, 0.95)]


def dashboard_json(namespace: str, title: str, hpa_name: str) -> str:
    """Tiles are PromQL over Managed Prometheus data, the same names the HPA uses."""
    sel = f'{{namespace="{namespace}"}}'
    tiles = [
        ("Requests running / waiting", [f"sum({m.BATCH}{sel})", f"sum({m.QUEUE}{sel})"]),
        ("KV cache usage", [f"avg({m.KV_CACHE_USAGE}{sel})"]),
        ("Time to first token p50 / p95 (s)", _quantiles(m.TTFT, sel)),
        ("Time per output token p50 / p95 (s)", _quantiles(m.TIME_PER_OUTPUT_TOKEN, sel)),
        ("End-to-end latency p50 / p95 (s)", _quantiles(m.E2E_LATENCY, sel)),
        ("Prompt / generation tokens per s", [f"sum(rate({m.exposition_name(m.PROMPT_TOKENS)}{sel}[5m]))",
                                             f"sum(rate({m.exposition_name(m.GENERATION_TOKENS)}{sel}[5m]))"]),
        ("Replicas (HPA current / desired)",
         [f'kube_horizontalpodautoscaler_status_current_replicas{{namespace="{namespace}",'
          f'horizontalpodautoscaler="{hpa_name}"}}',
          f'kube_horizontalpodautoscaler_status_desired_replicas{{namespace="{namespace}",'
          f'horizontalpodautoscaler="{hpa_name}"}}']),
        ("GPU utilisation (DCGM, when installed)", [f"avg(DCGM_FI_DEV_GPU_UTIL{sel})"]),
    ]
    widgets = [{"title": t, "xyChart": {"dataSets": [
        {"timeSeriesQuery": {"prometheusQuery": expr}, "plotType": "LINE"} for expr in exprs]}}
        for t, exprs in tiles]
    return json.dumps({"displayName": title, "mosaicLayout": {"columns": 12, "tiles": [
        {"xPos": (i % 2) * 6, "yPos": (i // 2) * 4, "width": 6, "height": 4, "widget": w}
        for i, w in enumerate(widgets)]}})


class Monitoring(pulumi.ComponentResource):
    """PodMonitoring on the leaders' /metrics and the deployment's dashboard."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:monitoring:Monitoring", name, None, opts)
        k8s.apiextensions.CustomResource(
            f"{name}-podmonitoring", api_version="monitoring.googleapis.com/v1", kind="PodMonitoring",
            metadata={"name": name, "namespace": args.namespace},
            spec={"selector": {"matchLabels": args.leader_selector},
                  "endpoints": [{"port": args.port_name, "path": "/metrics", "interval": args.interval}]},
            opts=pulumi.ResourceOptions(parent=self))
        if args.dashboard:
            gcp.monitoring.Dashboard(
                f"{name}-dashboard", project=args.project,
                dashboard_json=dashboard_json(args.namespace, args.title, args.hpa_name),
                opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})
