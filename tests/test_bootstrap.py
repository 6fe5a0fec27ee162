"""The config's ``bootstrap`` section (gpuprov/bootstrap.py): validation at load, the kubelet line."""

from __future__ import annotations

import base64
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuprov import bootstrap, config
from gpuprov.bootstrap import LIMITS, Bootstrap, kubelet_line, node_labels, tag_key
from gpuprov.errors import ConfigError

SCRIPT = "#!/bin/bash\nset -eu\necho joined\n"


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> config.Config:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    monkeypatch.setenv("GPUPROV_CONFIG", str(cfg))
    return config.load()


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_files_are_read_relative_to_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / "aws.sh").write_text(SCRIPT)
    (tmp_path / "gcp.sh").write_text("#!/bin/sh\n")
    cfg = load(tmp_path, monkeypatch, f"bootstrap: {{aws: boot/aws.sh, gcp: {tmp_path / 'gcp.sh'}}}\n")
    assert cfg.bootstrap.scripts == {"aws": SCRIPT, "gcp": "#!/bin/sh\n"}
    assert not cfg.bootstrap.kubelet
    assert cfg.bootstrap.user_data("aws", "training", "spot", "p1") == SCRIPT  # unchanged without kubelet
    assert cfg.bootstrap.user_data("azure", "training", "spot", "p1") is None
    assert not load(tmp_path, monkeypatch, "owner: x\n").bootstrap


@pytest.mark.parametrize(
    ("section", "files", "message"),
    [
        ("{aws: nope.sh}", {}, "no such file"),
        ("{aws: bin.sh}", {"bin.sh": b"#!/bin/sh\n\xff\xfe\n"}, "is not UTF-8 text"),
        ("{aws: nul.sh}", {"nul.sh": b"#!/bin/sh\n\0\n"}, "NUL"),
        ("{aws: empty.sh}", {"empty.sh": b"  \n"}, "is empty"),
        ("{aws: .}", {}, "is a directory"),
        ("{aws: 5}", {}, "must be a file path"),
        ("{oci: x.sh}", {}, "unknown key"),
        ("[a.sh]", {}, "must be a mapping"),
        ("{aws: a.sh, kubelet: 'yes'}", {"a.sh": b"#!/bin/sh\n"}, "true or false"),
        ("{kubelet: true}", {}, "no script"),
        ("{gcp: c.yaml, kubelet: true}", {"c.yaml": b"#cloud-config\n"}, "needs a shell script"),
    ],
)
def test_bad_bootstrap_is_one_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, files: dict[str, bytes], message: str
) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, monkeypatch, f"bootstrap: {section}\n")
    assert message in one_line(exc)
    assert "bootstrap" in str(exc.value)


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_each_clouds_limit_is_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cloud: str) -> None:
    raw = LIMITS[cloud] * 3 // 4 if cloud == "azure" else LIMITS[cloud]  # Azure counts the base64
    head = "#!/bin/sh\n"
    (tmp_path / "fit.sh").write_text(head + "#" * (raw - len(head)))
    (tmp_path / "over.sh").write_text(head + "#" * (raw - len(head) + 1))
    cfg = load(tmp_path, monkeypatch, f"bootstrap: {{{cloud}: fit.sh}}\n")
    text = cfg.bootstrap.script(cloud)
    assert text is not None and bootstrap.encoded_size(cloud, text) <= LIMITS[cloud]
    if cloud == "azure":
        assert len(base64.b64encode(text.encode())) == LIMITS[cloud]
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, monkeypatch, f"bootstrap: {{{cloud}: over.sh}}\n")
    assert "over the limit" in one_line(exc)
    # with the kubelet line the file must leave it room
    with pytest.raises(ConfigError, match="kept for the kubelet line"):
        load(tmp_path, monkeypatch, f"bootstrap: {{{cloud}: fit.sh, kubelet: true}}\n")


def test_multibyte_text_counts_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "u.sh").write_text("#!/bin/sh\n" + "é" * 8200)  # 16,410 bytes, 8,210 characters
    with pytest.raises(ConfigError, match="over the limit"):
        load(tmp_path, monkeypatch, "bootstrap: {aws: u.sh}\n")


def test_the_kubelet_line_goes_after_the_shebang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.sh").write_text(SCRIPT)
    cfg = load(tmp_path, monkeypatch, "bootstrap: {aws: a.sh, kubelet: true}\n")
    out = cfg.bootstrap.user_data("aws", "inference", "reserved_1y", "9b1f0c2d4e6a")
    assert (
        out == "#!/bin/bash\n" + kubelet_line("inference", "reserved_1y", "9b1f0c2d4e6a") + "\nset -eu\necho joined\n"
    )
    assert "gpuprov.io/market=on-demand" in out  # a reserved instance is on-demand capacity
    no_newline = Bootstrap({"aws": "#!/bin/sh"}, kubelet=True).user_data("aws", "w", "spot", "p")
    assert no_newline == "#!/bin/sh\n" + kubelet_line("w", "spot", "p") + "\n"


def test_the_kubelet_line_runs_in_a_shell_and_sets_exactly_the_labels(tmp_path: Path) -> None:
    script = Bootstrap({"aws": '#!/bin/sh\nprintf %s "$KUBELET_EXTRA_ARGS"\n'}, kubelet=True).user_data(
        "aws", "train-1.x_y", "spot", "abc_DEF-1"
    )
    assert script is not None
    path = tmp_path / "s.sh"
    path.write_text(script)
    run = subprocess.run(["/bin/sh", str(path)], capture_output=True, text=True, check=True, timeout=10)
    assert run.stdout == (
        "--node-labels=gpuprov.io/workload=train-1.x_y,gpuprov.io/market=spot,gpuprov.io/plan=abc_DEF-1"
        " --register-with-taints=nvidia.com/gpu=true:NoSchedule"
    )


@pytest.mark.parametrize(
    "workload",
    [
        "$(touch /tmp/pwned)",
        "`id`",
        "a'b",
        'a"b',
        "a b",
        "a,gpuprov.io/plan=evil",
        "a=b",
        "x;reboot",
        "a\nb",
        "-leading",
        "trailing-",
        "x" * 64,
        "",
        "${path}",
        "%{if}",
        "ünïcode",
    ],
)
def test_hostile_workload_names_never_reach_the_shell(workload: str) -> None:
    with pytest.raises(ConfigError) as exc:
        kubelet_line(workload, "spot", "plan1")
    assert "not a valid Kubernetes label value" in one_line(exc)
    with pytest.raises(ConfigError):
        Bootstrap({"gcp": "#!/bin/sh\n"}, kubelet=True).user_data("gcp", "ok", "spot", workload)  # as a plan id too


def test_a_valid_value_is_quoted_once_and_splits_back() -> None:
    line = kubelet_line("w" * 63, "on_demand", "p" * 63)
    assert len(line) < bootstrap.KUBELET_RESERVE
    words = shlex.split(line)
    assert words[0] == "export" and len(words) == 2
    assert node_labels("w", "spot", "p") == {
        "gpuprov.io/workload": "w",
        "gpuprov.io/market": "spot",
        "gpuprov.io/plan": "p",
    }


def test_one_mapping_from_node_labels_to_cloud_tags() -> None:
    from provisioner.base import MARKET_TAG, PLAN_TAG, WORKLOAD_TAG

    assert [tag_key(k) for k in node_labels("w", "spot", "p")] == [WORKLOAD_TAG, MARKET_TAG, PLAN_TAG]
    assert WORKLOAD_TAG == "gpuprov-workload"  # what the drivers have always tagged with
    for bad in ("gpuprov.io/", "example.com/workload", "gpuprov.io/Work"):
        with pytest.raises(ValueError):
            tag_key(bad)
