"""A checkpoint under a Cloud Storage prefix (model.source: gcs), read at preview without reading a weight: its
config.json and each safetensors file's header, through the Cloud Storage JSON API (objects.list with a `/`
delimiter for the files directly under the prefix, objects.get with alt=media and an HTTP Range for the header's
bytes; cloud.google.com/storage/docs/json_api/v1/objects/get, "Range" in .../docs/xml-api/reference-headers).

The files read are the ones vLLM reads from the staged disk: `gcloud storage cp --recursive gs://.../*` (the download
Job, images/model-downloader/download.py) puts the prefix's objects at the model directory's top level, where vLLM
takes config.json and the `*.safetensors` files, only those model.safetensors.index.json names where there is one
(vllm/model_executor/model_loader/weight_utils.py filter_duplicate_safetensors_files).

Credentials are Application Default Credentials with the read-only storage scope (google.auth.default: the
GOOGLE_APPLICATION_CREDENTIALS file, `gcloud auth application-default login`, or the metadata server), the ones
`pulumi preview` runs with. With STORAGE_EMULATOR_HOST set, the API is asked there, without credentials, as Google's
client libraries and gcloud do for an emulator.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import struct
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from planner.checkpoint import MAX_HEADER_BYTES, header_tensors

API = "https://storage.googleapis.com"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
READ_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
FIRST_READ = 1 << 20
"""Bytes first asked of each safetensors file: its 8-byte header length and, for a checkpoint's shards, the whole
JSON header (tens to hundreds of KiB); a longer header is read by a second range."""
INDEX = "model.safetensors.index.json"
TIMEOUT_S = 30.0


class GcsError(OSError):
    """Cloud Storage could not be read: no credentials, HTTP status and message, or not a safetensors checkpoint."""


class NotServableError(GcsError):
    """The checkpoint was read, and vLLM would stop loading it."""


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of gs://bucket/prefix; the prefix ends in "/" unless it is empty (the bucket's root)."""
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def _access_token() -> str:
    import google.auth
    import google.auth.exceptions
    import google.auth.transport.requests

    try:
        credentials, _ = google.auth.default(scopes=[READ_SCOPE])
        credentials.refresh(google.auth.transport.requests.Request())
    except google.auth.exceptions.GoogleAuthError as exc:
        raise GcsError(f"no Google credentials ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") \
            from None
    return str(credentials.token)


class Prefix:
    """The objects directly under gs://bucket/prefix."""

    def __init__(self, uri: str, root: str):
        self.uri = uri.rstrip("/")
        self.bucket, self.prefix = split_uri(uri)
        self.root = root
        self._headers = {} if root != API else {"Authorization": f"Bearer {_access_token()}"}

    def _get(self, path: str, query: dict[str, str], byte_range: tuple[int, int] | None = None) -> bytes:
        url = f"{self.root}/storage/v1/b/{urllib.parse.quote(self.bucket, safe='')}{path}?" \
              f"{urllib.parse.urlencode(query)}"
        headers = dict(self._headers)
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read())["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = exc.reason
            raise GcsError(f"HTTP {exc.code} from Cloud Storage: {message}") from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise GcsError(f"Cloud Storage not reachable at {self.root} ({getattr(exc, 'reason', exc)})") from None

    def names(self) -> list[str]:
        """The file names directly under the prefix (objects.list with a "/" delimiter, every page)."""
        names: list[str] = []
        query = {"prefix": self.prefix, "delimiter": "/", "fields": "items(name),nextPageToken"}
        while True:
            page = json.loads(self._get("/o", query))
            names += [item["name"][len(self.prefix):] for item in page.get("items", [])]
            if not page.get("nextPageToken"):
                return sorted(n for n in names if n)
            query["pageToken"] = page["nextPageToken"]

    def read(self, name: str, byte_range: tuple[int, int] | None = None) -> bytes:
        """A file's bytes, or the inclusive `byte_range` of them (fewer where the file is shorter)."""
        obj = urllib.parse.quote(self.prefix + name, safe="")
        return self._get(f"/o/{obj}", {"alt": "media"}, byte_range)

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise GcsError(f"{self.uri}/{name} is not a JSON file ({exc})") from None

    def header(self, name: str) -> dict[str, dict[str, Any]]:
        """{tensor name: {"dtype", "shape"}} of one .safetensors file, from range reads of its header only."""
        head = self.read(name, (0, FIRST_READ - 1))
        if len(head) < 8:
            raise GcsError(f"{self.uri}/{name}: shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head[:8])
        if length > MAX_HEADER_BYTES:
            raise GcsError(f"{self.uri}/{name}: header of {length} bytes, over the format's limit")
        if 8 + length > len(head):
            head += self.read(name, (len(head), 8 + length - 1))
        try:
            return header_tensors(json.loads(head[8:8 + length]))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise GcsError(f"{self.uri}/{name}: not a safetensors header ({exc})") from None


def api_root() -> str:
    """The JSON API's root: STORAGE_EMULATOR_HOST (a scheme added where it has none) when set, else Google's."""
    emulator = os.environ.get(EMULATOR_ENV, "").strip().rstrip("/")
    return (emulator if "://" in emulator else f"http://{emulator}") if emulator else API


def gcs_config(uri: str) -> dict[str, Any]:
    """config.json under the prefix; read once per process and API root (tools.plan builds the settings, then the
    program it runs under Pulumi's mocks builds them again), a copy returned each time."""
    return copy.deepcopy(_gcs_config(uri, api_root()))


def gcs_tensors(uri: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """({tensor name: {"dtype", "shape"}}, file names) of the safetensors files vLLM loads from the prefix; read once
    per process and API root, as gcs_config."""
    return copy.deepcopy(_gcs_tensors(uri, api_root()))


@functools.cache
def _gcs_config(uri: str, root: str) -> dict[str, Any]:
    prefix = Prefix(uri, root)
    data = prefix.json("config.json")
    if not isinstance(data, dict):
        raise GcsError(f"{prefix.uri}/config.json holds a JSON {type(data).__name__}, not a config.json object")
    return data


@functools.cache
def _gcs_tensors(uri: str, root: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    prefix = Prefix(uri, root)
    names = prefix.names()
    files = [n for n in names if n.endswith(".safetensors")]
    if INDEX in names:
        index = prefix.json(INDEX)
        listed = set((index.get("weight_map") or {}).values()) if isinstance(index, dict) else set()
        if missing := listed - set(files):
            raise NotServableError(f"{INDEX} names {', '.join(sorted(missing))}, which is not under {prefix.uri}; "
                                   "vLLM stops loading on that (weight_utils.py filter_duplicate_safetensors_files)")
        files = sorted(listed)
    if not files:
        raise GcsError(f"no .safetensors files directly under {prefix.uri}")
    tensors: dict[str, dict[str, Any]] = {}
    for name in files:
        tensors.update(prefix.header(name))
    return tensors, files
