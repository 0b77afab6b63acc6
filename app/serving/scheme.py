"""The page in its light colours, whatever the visitor's system prefers.

Gradio 6.31 follows the system's colour scheme: with `prefers-color-scheme: dark` it puts the page in its
dark theme (the `dark` class on <body>). This page's own views are drawn for a light background, in inline
colours and plotly figures: the token canvas, its tags and legends, the counters and their glossary, the
heatmaps and maps. In the dark theme 70 of its texts fell below WCAG AA contrast (measured in Chromium
after a Run and a Compare: grey labels on black at 2.6:1, light tags on the canvas's yellow cells at
1.3:1, white on the dark theme's orange buttons at 3.6:1). So the page answers Gradio's question about
the system's scheme with "light": Gradio asks `matchMedia("(prefers-color-scheme: dark)")` as the app
mounts and listens to it for changes, and both get a query that never matches. An explicit choice still
wins: Gradio reads `?__theme=dark` in the address first.

The guard must run before Gradio's modules do, so it travels with app.serving.frames.FirstScript, first in the
page's <head>. tests/test_readability_browser.py reads the page in a dark-scheme browser too.
"""

LIGHT_SCHEME_JS = """<script>
(() => {
  const media = window.matchMedia.bind(window);
  window.matchMedia = (query) => media(/prefers-color-scheme\\s*:\\s*dark/.test(String(query)) ? "not all" : query);
})();
</script>
"""
