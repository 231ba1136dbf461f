"""The wheel works outside the checkout: schemas and alert rules inside, the CLI and the
broker-free test harness running from it.

The wheel is installed without dependencies into a fresh venv that borrows this venv's
installed packages through a path entry (not a site directory, so this checkout's editable
installs are not loaded there): txstream itself comes from the wheel, and the example apps,
a distribution of their own, do not.
"""

from __future__ import annotations

import os
import textwrap
import zipfile
from pathlib import Path

from tests.support.wheel_venv import ROOT, build_wheel, run, venv_with


def test_the_wheel_holds_the_schemas_and_runs_from_a_fresh_venv(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "txstream/avro/txstream.BatchEnvelope.avsc" in names
    assert "txstream/avro/leaderboard/Vote.avsc" in names
    assert "txstream/observability/alerts.yml" in names
    for asset in ("index.html", "console.js", "console.css"):
        assert f"txstream_coordinator/console/static/{asset}" in names
    assert len([n for n in names if n.endswith(".avsc")]) == len(
        list(ROOT.glob("schemas/**/*.avsc"))
    )
    top = sorted({n.split("/", 1)[0] for n in names})
    assert [t for t in top if not t.startswith("txstream")] == [], "it shadows no user module"

    venv = tmp_path / "venv"
    python = venv_with(wheel, venv)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "lastvote.py").write_text(
        textwrap.dedent("""
        from txstream import App


        def build():
            app = App("lastvote")
            votes = app.stream("votes", schema="leaderboard.Vote")
            app.table("last", schema="leaderboard.Vote", key=("contestant_number",))

            @app.procedure(input=votes)
            def keep(ctx, batch):
                for vote in batch:
                    ctx.table("last").put(vote)

            return app
    """)
    )
    script = textwrap.dedent("""
        import txstream
        from txstream.config import Settings
        from txstream.testing import AppTester
        from lastvote import build

        print(txstream.__file__)
        print(Settings().schema_dir)
        t = AppTester(build())
        t.feed("votes", [{"vote_id": 1, "phone_number": 6175550101, "contestant_number": 1}])
        assert t.table("last")[(1,)]["vote_id"] == 1
        from txstream_coordinator.console import STATIC
        assert "console.js" in (STATIC / "index.html").read_text()
        try:
            import leaderboard
        except ImportError:
            pass
        else:
            raise AssertionError(f"an example app came along: {leaderboard.__file__}")
    """)
    env = {**os.environ, "PYTHONPATH": str(elsewhere)}
    where, schemas = run([str(python), "-c", script], cwd=elsewhere, env=env).split()
    assert where.startswith(str(venv)), where
    assert schemas == str(Path(where).parent / "avro"), schemas
    described = run([str(venv / "bin" / "txstream"), "describe", "--app", "lastvote:build"],
                    cwd=elsewhere, env=env)  # fmt: skip
    assert "votes [leaderboard.Vote]: topic lastvote.votes" in described
