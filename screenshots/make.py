"""Make the README's SVG screenshots from the seeded demo store, with a fixed clock.

    python screenshots/make.py        # writes screenshots/*.svg

Runs the real dashboard headless (Textual's run_test) in a private GPU_ROUTER_HOME.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

def demo_env(root: Path) -> None:
    os.environ["GPU_ROUTER_HOME"] = str(root / "home")
    os.environ["GPU_ROUTER_CONFIG"] = str(root / "config.yaml")
    from tui.dash.demo import CONFIG

    (root / "config.yaml").write_text(CONFIG)


async def shoot(out: Path, size=(120, 36)) -> list[Path]:
    from tui.dash.app import DashApp
    from tui.dash.demo import NOW, seed

    seed()
    made = []
    app = DashApp(clock=lambda: NOW, live=False, bell=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        await pilot.press("j")  # yolo-train: running, with a loss curve and a log
        await pilot.pause(0.5)
        made.append(_save(app, out / "dashboard.svg"))
        await pilot.press("k")  # the pending job
        await pilot.press("a")
        await pilot.pause(0.3)
        made.append(_save(app, out / "approval.svg"))
        await pilot.press("escape")
        await pilot.press("j", "j")
        await pilot.press("enter")
        await pilot.pause(0.3)
        made.append(_save(app, out / "detail.svg"))
        await pilot.press("escape")
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        made.append(_save(app, out / "help.svg"))
    return made


def _save(app, path: Path) -> Path:
    app.save_screenshot(filename=path.name, path=str(path.parent))
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        demo_env(Path(tmp))
        for p in asyncio.run(shoot(HERE)):
            print(p)


if __name__ == "__main__":
    main()
