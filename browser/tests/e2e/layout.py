"""The screenshot check every page gets: a full-page screenshot, then a check that fails on a
broken layout, i.e. a page wider than the window or visible pieces of content covering each other.

    from browser.tests.e2e.layout import assert_layout_sound
    assert_layout_sound(self.page, "overview")          # test-artifacts/layout-overview.png

What counts as content: elements with text of their own, form controls, images and SVG charts.
Two of them overlap when their boxes (one box per line for inline text) share more than 2 px in
both directions and neither holds the other; fixed and sticky layers (the top bar, dialogs) are
left out because they cover content by design.
"""

from browser.tests.e2e.harness import ARTIFACTS

LAYOUT_JS = """() => {
  const doc = document.documentElement;
  const problems = [];
  const overflow = doc.scrollWidth - doc.clientWidth;
  if (overflow > 1) problems.push(`page is ${overflow}px wider than the window`);

  const layered = el => {
    for (let e = el; e && e !== document.body; e = e.parentElement) {
      const p = getComputedStyle(e).position;
      if (p === 'fixed' || p === 'sticky') return true;
    }
    return false;
  };
  const visible = el => {
    // A closed <details> keeps laying out its content (content-visibility: hidden) but shows none.
    const closed = el.closest('details:not([open])');
    if (closed && !closed.querySelector(':scope > summary')?.contains(el)) return false;
    if (!el.checkVisibility({opacityProperty: true, visibilityProperty: true})) return false;
    const r = el.getBoundingClientRect();
    return r.width > 2 && r.height > 2;  // screen-reader-only text is clipped to 1 px
  };
  // Inside a box that scrolls sideways (the tab strip on a phone) content may run past the edge.
  const scrolled = el => {
    for (let e = el.parentElement; e && e !== document.body; e = e.parentElement)
      if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(e).overflowX)) return true;
    return false;
  };
  const ownText = el => [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
  const CONTROLS = 'input:not([type=hidden]), select, textarea, button, img, svg, progress, meter';
  const leaves = [...document.body.querySelectorAll('*')].filter(el =>
    (el.matches(CONTROLS) || ownText(el)) && !el.closest('svg *, button *, select *') &&
    visible(el) && !layered(el));

  const boxes = [];
  for (const el of leaves) {
    const inline = getComputedStyle(el).display === 'inline';
    const rects = inline ? [...el.getClientRects()] : [el.getBoundingClientRect()];
    for (const r of rects) if (r.width > 2 && r.height > 2) boxes.push([el, r]);
  }
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className.trim()
      ? '.' + el.className.trim().split(/\\s+/).join('.') : '') +
    ` "${(el.textContent || el.value || '').trim().slice(0, 24)}"`;
  const seen = new Set();
  for (let i = 0; i < boxes.length; i++) {
    const [a, ra] = boxes[i];
    for (let j = i + 1; j < boxes.length; j++) {
      const [b, rb] = boxes[j];
      if (a === b || a.contains(b) || b.contains(a)) continue;
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > 2 && h > 2) {
        const key = name(a) + ' / ' + name(b);
        if (!seen.has(key)) { seen.add(key); problems.push('overlap: ' + key); }
      }
    }
    if (ra.right > doc.clientWidth + 1 && !scrolled(a)) problems.push(`past the right edge: ${name(a)}`);
  }
  return problems.slice(0, 20);
}"""


def layout_problems(page) -> list[str]:
    """What is broken in the page's layout as it is drawn now (an empty list when nothing is)."""
    return page.evaluate(LAYOUT_JS)


def assert_layout_sound(page, name: str) -> None:
    """Save test-artifacts/layout-<name>.png and fail when the page overflows or content overlaps."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"layout-{name}.png"), full_page=True)
    problems = layout_problems(page)
    assert not problems, f"{name}: broken layout:\n" + "\n".join(problems)
