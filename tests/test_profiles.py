import os
import random
from pathlib import Path

import pytest

from pytest_solgate.declare.profiles import (
    builtin_profiles,
    builtin_profiles_dir,
    find_profile,
    load_profile,
    load_profiles,
    match_device,
    profile_to_toml,
)
from pytest_solgate.support.errors import ProfileError

REQUIRED = [
    "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h200",
    "h200-nvl", "b200", "gb200", "l4", "l40s", "a10", "a10g", "t4", "v100-sxm2", "rtx-4090", "rtx-3090",
    "rtx-6000-ada", "mi300x", "mi250x",
]

# Every device name listed in shared/reference/gpu-specs.md, and the profile it must get.
DEVICE_NAMES = {
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H100": "h100",
    "NVIDIA H200": "h200",
    "NVIDIA H200 NVL": "h200-nvl",
    "NVIDIA B200": "b200",
    "NVIDIA GB200": "gb200",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA A10": "a10",
    "NVIDIA A10G": "a10g",
    "Tesla T4": "t4",
    "Tesla V100-SXM2-16GB": "v100-sxm2",
    "Tesla V100-SXM2-32GB": "v100-sxm2",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "NVIDIA RTX 6000 Ada Generation": "rtx-6000-ada",
    "AMD Instinct MI300X": "mi300x",
    "AMD Instinct MI300X VF": "mi300x",
    "AMD Instinct MI250X": "mi250x",
    "AMD Instinct MI250X / MI250": "mi250x",
}


def test_every_required_profile_ships_and_loads():
    ids = {p.id for p in builtin_profiles()}
    assert set(REQUIRED) <= ids
    for profile in builtin_profiles():
        assert profile.source, profile.id
        assert profile.memory_bandwidth_gbps > 0 and profile.peak_tflops
        assert load_profile(profile.path) == profile
        assert profile.kind == "gpu"


def test_unconfirmed_figures_say_so():
    by_id = {p.id: p for p in builtin_profiles()}
    for unconfirmed in ("a10g", "h200-nvl", "h100"):
        assert "unconfirmed" in by_id[unconfirmed].notes


def test_h100_sxm_matches_the_datasheet():
    p = find_profile("h100-sxm")
    assert p.memory_bandwidth_gbps == 3350 and p.peak_tflops["bf16_tensor"] == 989.4
    assert p.device.sm_count == 132 and p.device.l2_cache_mb == 50


@pytest.mark.parametrize("name, expected", sorted(DEVICE_NAMES.items()))
def test_matcher_on_every_listed_device_name(name, expected):
    assert match_device(name, builtin_profiles()).profile.id == expected


def test_generic_amd_name_matches_by_arch():
    assert match_device("AMD Radeon Graphics", builtin_profiles(), arch="gfx942:sramecc+:xnack-").profile.id == "mi300x"


def test_no_match_names_the_device_and_the_way_out():
    with pytest.raises(ProfileError) as info:
        match_device("NVIDIA Quantum Q1", builtin_profiles())
    message = str(info.value)
    assert "'NVIDIA Quantum Q1'" in message and "--sol-profile" in message and "solgate calibrate" in message


def test_sm_count_mismatch_warns():
    match = match_device("NVIDIA H100 80GB HBM3", builtin_profiles(), sm_count=114)
    assert match.profile.id == "h100-sxm" and "114 SMs" in match.warning and "132" in match.warning
    assert not match_device("NVIDIA H100 80GB HBM3", builtin_profiles(), sm_count=132).warning


def test_match_does_not_depend_on_file_order():
    profiles = builtin_profiles()
    for seed in range(5):
        shuffled = profiles[:]
        random.Random(seed).shuffle(shuffled)
        for name, expected in DEVICE_NAMES.items():
            assert match_device(name, shuffled).profile.id == expected


GOOD = """
id = "x"
name = "X"
kind = "gpu"
memory_bandwidth_gbps = 100
[peak_tflops]
fp32 = 1
"""


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("id = ", "invalid TOML"),
        ("", "the profile file is empty"),
        (GOOD.replace('name = "X"\n', ""), "missing required field 'name'"),
        (GOOD.replace("memory_bandwidth_gbps = 100", 'memory_bandwidth_gbps = "fast"'), "field 'memory_bandwidth_gbps' must be a number"),
        (GOOD.replace("memory_bandwidth_gbps = 100", "memory_bandwidth_gbps = -5"), "must be a finite number > 0, got -5"),
        (GOOD.replace("fp32 = 1", "fp32 = 0"), "'peak_tflops.fp32' must be a finite number > 0"),
        (GOOD.replace("fp32 = 1", "fp33 = 1"), "unknown field 'peak_tflops.fp33'"),
        ("colour = 'red'\n" + GOOD, "unknown field 'colour'"),
        (GOOD.replace('kind = "gpu"', 'kind = "tpu"'), "field 'kind' must be"),
        (GOOD.replace('id = "x"', 'id = "X Y"'), "field 'id' must be lowercase"),
        (GOOD + "[device]\nsm_count = 0\n", "'device.sm_count' must be a finite number > 0"),
        (GOOD + "[device]\ncolour = 1\n", "unknown field 'device.colour'"),
        (GOOD.replace("[peak_tflops]\nfp32 = 1", "[peak_tflops]"), "needs at least one precision"),
        (GOOD.replace('kind = "gpu"', 'kind = "gpu"\nmatch = "H100"'), "field 'match' must be a list"),
    ],
)
def test_malformed_profiles_name_file_and_field(tmp_path, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=fragment.replace("(", r"\(").replace(".", r"\.")) as info:
        load_profile(path)
    assert str(info.value).startswith(str(path))


def test_missing_directory_and_unreadable(tmp_path, monkeypatch):
    with pytest.raises(ProfileError, match="no such profile file"):
        load_profile(tmp_path / "nope.toml")
    with pytest.raises(ProfileError, match="is a directory"):
        load_profile(tmp_path)
    path = tmp_path / "locked.toml"
    path.write_text(GOOD)

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(ProfileError, match="cannot read the profile file .Permission denied."):
        load_profile(path)


def test_duplicate_ids_and_unknown_id(tmp_path):
    (tmp_path / "a.toml").write_text(GOOD)
    (tmp_path / "b.toml").write_text(GOOD)
    with pytest.raises(ProfileError, match="already defined"):
        load_profiles([tmp_path])
    with pytest.raises(ProfileError, match="no profile with id 'h100-sxn'.*h100-sxm"):
        find_profile("h100-sxn")


def test_round_trip_through_toml(tmp_path):
    for profile in builtin_profiles():
        path = tmp_path / f"{profile.id}.toml"
        path.write_text(profile_to_toml(profile))
        assert load_profile(path) == profile


def test_builtin_dir_is_the_checkout_or_the_package():
    assert (builtin_profiles_dir() / "h100-sxm.toml").is_file()
    assert os.path.basename(builtin_profiles_dir()) == "hw_profiles"


def test_gh200_is_not_taken_for_an_h200():
    # GH200 parts (HBM3 96 GB at about 4 TB/s) once matched the H200's "*H200*" glob.
    with pytest.raises(ProfileError, match="no hardware profile matches device 'NVIDIA GH200 480GB'"):
        match_device("NVIDIA GH200 480GB", builtin_profiles())
    assert match_device("NVIDIA H200", builtin_profiles()).profile.id == "h200"
    assert match_device("NVIDIA H200 NVL", builtin_profiles()).profile.id == "h200-nvl"


def test_the_h200_l2_is_the_60_mib_the_device_reports():
    """hw_profiles/h200.toml said 50 MB; an H200 reports 63 MB (60 MiB) of L2 (issue 35, 2026-12-04)."""
    p = find_profile("h200")
    assert p.device.l2_bytes == pytest.approx(60 * 2**20, rel=1e-6) and "60 MiB" in p.notes and "unconfirmed" not in p.notes
