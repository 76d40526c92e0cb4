"""Names and ranges the program sends to Google Cloud and Kubernetes, checked the way the services check them, so a
stack that would fail at `pulumi up` (or run with a hole in it) fails at preview with one line. Facts first, each
with its source, then one validator per kind of name; every function returns the reason a value is refused, or None.
"""

from __future__ import annotations

import ipaddress
import re

REGION_ZONES: dict[str, str] = {
    "us-central1": "abcf", "us-east1": "bcd", "us-east4": "abc", "us-east5": "abc", "us-south1": "abc",
    "us-west1": "abc", "us-west2": "abc", "us-west3": "abc", "us-west4": "abc",
    "northamerica-northeast1": "abc", "northamerica-northeast2": "abc", "northamerica-south1": "abc",
    "southamerica-east1": "abc", "southamerica-west1": "abc",
    "europe-west1": "bcd", "europe-west2": "abc", "europe-west3": "abc", "europe-west4": "abc",
    "europe-west6": "abc", "europe-west8": "abc", "europe-west9": "abc", "europe-west10": "abc",
    "europe-west12": "abc", "europe-north1": "abc", "europe-north2": "abc", "europe-central2": "abc",
    "europe-southwest1": "abc", "me-west1": "abc", "me-central1": "abc", "me-central2": "abc",
    "africa-south1": "abc", "asia-east1": "abc", "asia-east2": "abc", "asia-northeast1": "abc",
    "asia-northeast2": "abc", "asia-northeast3": "abc", "asia-south1": "abc", "asia-south2": "abc",
    "asia-southeast1": "abc", "asia-southeast2": "abc", "australia-southeast1": "abc",
    "australia-southeast2": "abc",
}
"""The zone letters of each Compute Engine region (Compute Engine "Regions and zones", 2026). A region not listed
here is not checked (a newer region): Compute Engine then refuses a wrong zone at `pulumi up`."""

GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
"""Compute Engine resource names (reservations, disks, images): RFC 1035, 1-63 characters, a lowercase letter first,
then lowercase letters, digits or hyphens, not ending in a hyphen (Compute Engine "Resource naming convention")."""

BUCKET_PART = re.compile(r"[a-z0-9]([-a-z0-9_]*[a-z0-9])?")
"""Cloud Storage bucket names (Cloud Storage "Bucket naming"): lowercase letters, digits, '-', '_' and '.', starting
and ending with a letter or digit; 3-63 characters, or up to 222 with dots, each dot-separated part at most 63; not
an IP address, not starting with "goog", not containing "google" or close misspellings of it."""

VPC_NEVER = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32"))
"""IPv4 ranges no VPC subnet may use (VPC "Valid IPv4 ranges" lists what is allowed: RFC 1918, RFC 6598, the
documentation and benchmarking ranges, class E and privately used public ranges; loopback, link-local, multicast,
0.0.0.0/8 and broadcast are never valid). A NetworkPolicy admitting such a range, or 0.0.0.0/0, would admit what
the proxy-only subnet never sends from."""
VPC_LARGEST_PREFIX = 8
"""A subnet's primary range is at most a /8 (VPC "Subnets": IPv4 subnet ranges from /8 to /29)."""

_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:(?P<host>{_DOMAIN}(?:\.{_DOMAIN})*(?::[0-9]+)?|\[[0-9a-fA-F:]+\](?::[0-9]+)?)/)?"
    rf"(?P<path>{_PATH}(?:/{_PATH})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?")
"""An image reference as the kubelet's container runtime parses it (distribution/reference's grammar: an optional
registry host with port, lowercase path components, a tag of at most 128 word characters, dots and dashes, an
optional digest). Kubernetes itself refuses leading or trailing white space (validation of `image`)."""
DIGEST = {"sha256": 64, "sha384": 96, "sha512": 128}


def zone_problem(zone: str) -> str | None:
    """Why `zone` (us-central1-a) is no zone of its region, or None (also for regions the table does not list)."""
    region, _, letter = zone.rpartition("-")
    letters = REGION_ZONES.get(region)
    if letters is None or letter in letters:
        return None
    return f"{region} has zones {', '.join(f'{region}-{x}' for x in letters)}"


def gce_name_problem(name: str) -> str | None:
    if GCE_NAME.fullmatch(name):
        return None
    return ("a Compute Engine name is 1-63 characters: a lowercase letter, then lowercase letters, digits or "
            "hyphens, not ending in a hyphen")


def bucket_problem(bucket: str) -> str | None:
    """Why Cloud Storage would refuse `bucket` as a bucket name, or None."""
    rule = ("a bucket name is 3-63 characters (222 with dots) of lowercase letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit")
    parts = bucket.split(".")
    if not 3 <= len(bucket) <= (222 if len(parts) > 1 else 63) or \
            not all(len(p) <= 63 and BUCKET_PART.fullmatch(p) for p in parts):
        return rule
    try:
        ipaddress.ip_address(bucket)
        return "a bucket name may not be an IP address"
    except ValueError:
        pass
    if bucket.startswith("goog") or re.search(r"g[o0]{2}g[l1]e", bucket):
        return 'a bucket name may not start with "goog" or contain "google"'
    return None


def vpc_range_problem(cidr: str) -> str | None:
    """Why Compute Engine would refuse `cidr` as a subnet's IPv4 range, or None."""
    try:
        network = ipaddress.ip_network(cidr, strict=True)
    except ValueError as exc:
        return f"not a network in CIDR form ({exc})"
    if network.version != 4:
        return "expected an IPv4 range"
    if network.prefixlen < VPC_LARGEST_PREFIX:
        return f"a subnet range is /{VPC_LARGEST_PREFIX} or smaller"
    if any(network.overlaps(bad) for bad in VPC_NEVER):
        return "loopback, link-local, multicast, 0.0.0.0/8 and broadcast addresses are no subnet range"
    return None


def image_problem(image: str) -> str | None:
    """Why Kubernetes or the kubelet would refuse `image` as a container image reference, or None."""
    if image != image.strip() or not image:
        return "an image reference has no leading or trailing white space"
    found = IMAGE_REFERENCE.fullmatch(image)
    if found is None:
        return ("not an image reference: [registry[:port]/]lowercase/path[:tag][@sha256:digest], a tag of at most "
                "128 letters, digits, '_', '.' and '-'")
    host = found.group("host") or ""
    if host and host != host.lower() and not any(c in host for c in ".:[") and host != "localhost":
        return "a repository path is lowercase (an uppercase first part would be read as a registry host)"
    digest = found.group("digest")
    if digest:
        algorithm, _, value = digest.partition(":")
        if algorithm in DIGEST and len(value) != DIGEST[algorithm]:
            return f"a {algorithm} digest has {DIGEST[algorithm]} hex digits"
    return None
