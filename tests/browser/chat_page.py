#!/usr/bin/env python3
"""Drive the chat page in a real headless Chromium (Selenium; the browser and chromedriver that
tools/host_tools.py finds: Debian's chromium, or Google Chrome on GitHub's runners), send one message
and record what the page shows while the answer streams in. Runs under .venv-ui (Gradio's environment):

    chat_page.py --url http://127.0.0.1:7860 --message hello [--screenshot out.png] [--timeout 120]

Prints one JSON object: the distinct texts the last assistant message showed, in order, as a
MutationObserver in the page saw them ("snapshots"), and the
final text. Exit 0 when an answer appeared, 1 when none did within the timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.host_tools import browser, chromedriver  # standard library only: runs under .venv-ui

BOT_TEXTS = ("return Array.from(document.querySelectorAll('[data-testid=\"bot\"]'))"
             ".map(e => e.innerText.trim())")
# Polling over WebDriver can miss a whole short answer between two polls, so the page records every text the last
# assistant message shows, from a MutationObserver, into window.__texts; the poll only decides when it is done.
RECORD_TEXTS = """
window.__texts = [];
const last = () => { const bots = document.querySelectorAll('[data-testid="bot"]');
                     return bots.length ? bots[bots.length - 1].innerText.trim() : ""; };
new MutationObserver(() => { const text = last(); const texts = window.__texts;
    if (text && (!texts.length || texts[texts.length - 1] !== text)) texts.push(text); })
  .observe(document.body, {subtree: true, childList: true, characterData: true});
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--message", required=True)
    parser.add_argument("--screenshot")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--chromium", default=browser(), help="browser binary (default: as tools/host_tools.py finds)")
    parser.add_argument("--chromedriver", default=chromedriver(), help="its driver (default: likewise)")
    args = parser.parse_args(argv)
    if not (args.chromium and args.chromedriver):
        parser.error("no Chromium-family browser or chromedriver found; `make host-tools` installs them")
    options = Options()
    options.binary_location = args.chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,820"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(args.chromedriver), options=options)
    snapshots: list[str] = []
    recorded: list[str] = []
    try:
        driver.get(args.url)
        box = WebDriverWait(driver, 60).until(ec.element_to_be_clickable((By.CSS_SELECTOR, "textarea")))
        driver.execute_script(RECORD_TEXTS)
        box.send_keys(args.message)
        box.send_keys(Keys.ENTER)
        deadline, stable_since = time.monotonic() + args.timeout, None
        while time.monotonic() < deadline:
            texts = driver.execute_script(BOT_TEXTS) or []
            current = texts[-1] if texts else ""
            if current and (not snapshots or snapshots[-1] != current):
                snapshots.append(current)
                stable_since = time.monotonic()
            elif snapshots and stable_since and time.monotonic() - stable_since > 3:
                break  # no change for 3 s: the answer is complete
            time.sleep(0.1)
        recorded = driver.execute_script("return window.__texts") or []
        if args.screenshot:
            driver.save_screenshot(args.screenshot)
    finally:
        driver.quit()
    final = snapshots[-1] if snapshots else ""  # the text that stayed for 3 s
    print(json.dumps({"snapshots": recorded or snapshots, "final": final}))
    return 0 if snapshots else 1


if __name__ == "__main__":
    sys.exit(main())
