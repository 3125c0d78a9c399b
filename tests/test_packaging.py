"""The built wheel: profiles inside the package, found from an installed copy; entry points."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("pytest_solgate-*.whl")
    return path


def test_wheel_ships_every_profile_and_template(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if n.startswith("pytest_solgate/hw_profiles/")}
    assert {p.name for p in (ROOT / "hw_profiles").glob("*.toml")} == shipped
    assert "pytest_solgate/templates/report.html.j2" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[pytest11]\nsolgate = pytest_solgate.plugin" in entry_points
    assert "solgate = pytest_solgate.cli:main" in entry_points


def test_installed_copy_finds_its_profiles_away_from_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import pytest_solgate.declare.profiles as p;"
        "d = p.builtin_profiles_dir(); assert str(d).startswith(sys.argv[1]), d;"
        "print(len(p.builtin_profiles()), p.find_profile('h100-sxm').memory_bandwidth_gbps)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    count, bandwidth = done.stdout.split()
    assert int(count) == len(list((ROOT / "hw_profiles").glob("*.toml"))) and float(bandwidth) == 3350
