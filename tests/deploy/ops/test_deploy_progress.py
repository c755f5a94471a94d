"""A real deploy's progress events (issue 45, item 6), to a real sshd: each file the deploy
sends is announced with its size, its bytes are named after it and add up to it, it ends once
the board has it; after the last byte the phase that follows is shown (switching, loading,
smoke test), and the summary's bytes are the result's."""

from __future__ import annotations

from deploy_helpers import deploy

from q25deploy.cli import progress
from q25deploy.cli.progress_view import Task, label, summary


def test_a_deploys_events_name_each_file_and_the_phases_after_the_last_byte(
    tmp_path, capsys, ssh, models, q25tok, monkeypatch
):
    events: list[tuple] = []
    for kind in ("phase", "file", "sent", "file_done", "total", "finish"):
        real = getattr(progress.Progress, kind)

        def logged(self, *args, _real=real, _kind=kind):
            events.append((_kind, *args))
            return _real(self, *args)

        monkeypatch.setattr(progress.Progress, kind, logged)
    monkeypatch.setattr(progress, "wanted", lambda quiet=False, json=False: True)
    code, res, err = deploy(capsys, ssh, ssh["servers"][0], tmp_path / "board", models["A"], runtime=q25tok)
    assert code == 0, err
    (r,) = res
    files = {e[2]: e[3] for e in events if e[0] == "file"}
    assert len(files) == r["files_sent"] and sum(files.values()) == r["bytes_sent"]
    per_file: dict[str, int] = {}
    for e in events:
        if e[0] == "sent":
            assert e[3] in files  # every byte is some file's
            per_file[e[3]] = per_file.get(e[3], 0) + e[2]
    assert per_file == {rel: n for rel, n in files.items() if n}
    # replayed on a fake clock: at the last byte the label is the check, then the phases
    t, seen, clock = Task(r["host"]), [], 0.0
    for e in events:
        clock += 0.01
        if e[0] == "file":
            t.start_file(e[2], e[3])
        elif e[0] == "sent":
            t.add_bytes(clock, e[2], e[3])
        elif e[0] == "file_done":
            seen.append(label(t))
            t.end_file(e[2])
        elif e[0] == "phase":
            t.phase = e[2]
        elif e[0] == "total":
            t.total += e[2]
        seen.append(label(t))
    assert seen[-1] == "smoke test" and not any("sending" in s or "verifying" in s for s in seen[-3:])
    after = seen[max(i for i, s in enumerate(seen) if s.startswith("verifying")) :]
    assert f"switching to release {r['release']}" in after and after.index("smoke test") > after.index(
        f"switching to release {r['release']}"
    )
    assert t.sent == r["bytes_sent"] and "sent in" in summary("deploy", [t], clock, 0.0)
