"""Put one window's values in force in a cluster: ``gpuprov k8s apply-window``.

Through the official ``kubernetes`` Python client (the ``k8s`` extra), imported here only when a
window is applied: in-cluster config when running in a pod (the window CronJobs), else the
kubeconfig (``--kubeconfig``/``$KUBECONFIG``/``~/.kube/config``, ``--context``). Each object gets
one JSON merge patch (``application/merge-patch+json``: custom resources take no strategic merge),
so applying a window twice is harmless and nothing else on the object is touched but the fields
patched (``render.window_patches``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from gpuprov.errors import ConfigError, CredentialsError, MissingExtraError, ProvisioningError, TransientError
from k8s.render import Patch

MERGE_PATCH = "application/merge-patch+json"


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    try:
        from kubernetes import client
        from kubernetes import config as kube_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise MissingExtraError(
            "k8s apply-window needs the kubernetes client", hint="pip install 'gpuprov[k8s]'"
        ) from None
    config: Any = kube_config  # its loaders are untyped
    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False)
    except (ConfigException, OSError) as exc:
        raise ConfigError(
            f"no usable Kubernetes config: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        ) from None
    except Exception as exc:  # a kubeconfig that is not YAML, or not one: never quoted
        raise ConfigError(
            f"no usable Kubernetes config: the kubeconfig cannot be read ({type(exc).__name__})"
        ) from None


def apply(patches: Sequence[Patch], api: Any) -> list[str]:
    """Send each patch; one line per object patched. A missing object or a refusal stops here."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as WireError

    custom = client.CustomObjectsApi(api)
    done = []
    for p in patches:
        what = f"{p.plural}.{p.group}/{p.name}"
        try:
            custom.patch_cluster_custom_object(
                p.group, p.version, p.plural, p.name, p.body, _content_type=MERGE_PATCH, _request_timeout=30
            )
        except ApiException as exc:
            raise _translate(exc, what) from None
        except (WireError, OSError):
            raise TransientError(f"cannot reach the Kubernetes API patching {what}") from None
        done.append(f"patched {what}: {json.dumps(p.body['spec'], sort_keys=True)[:160]}")
    return done


def _translate(exc: Any, what: str) -> Exception:
    status = int(getattr(exc, "status", 0) or 0)
    reason = ""
    try:
        reason = str(json.loads(exc.body or "{}").get("message", ""))[:160]
    except (TypeError, ValueError):
        reason = str(getattr(exc, "reason", ""))[:80]
    if status == 404:
        return ConfigError(
            f"{what} is not in the cluster",
            hint="apply the gpuprov k8s output (nodepools.yaml, clusterqueues.yaml) before its window CronJobs",
        )
    if status in (401, 403):
        return CredentialsError(
            f"the Kubernetes API refused to patch {what} ({status})",
            hint="the window CronJobs' ServiceAccount needs patch on clusterqueues and nodepools (windows-rbac.yaml)",
        )
    if status == 429 or status >= 500:
        return TransientError(f"the Kubernetes API failed patching {what} ({status}) {reason}".rstrip())
    return ProvisioningError(f"the Kubernetes API rejected the patch of {what} ({status}) {reason}".rstrip())
