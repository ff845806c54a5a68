"""evaluators/reports/reliability/html.py: the four figures of the synthetic report
(tests/support/reliability.py) drawn as PNG files, and the page: self-contained (each figure's bytes
as base64), its text escaped, the sanity table's cells formatted by hand."""

from __future__ import annotations

import base64
import html

from evaluators.reports.reliability.html import figures, page, write_html
from tests.support.reliability import report

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_figures_are_written_and_the_page_embeds_their_bytes(tmp_path):
    r = report("loans <&> 'x'")
    images = figures(r, tmp_path)
    assert list(images) == ["agreement", "sanity", "faithfulness", "settle"]
    assert all(path == tmp_path / f"{name}.png" and path.read_bytes()[:8] == PNG for name, path in images.items())
    text = page(r, images)
    for name, path in images.items():
        assert f'<img alt="{name}" src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}">' in text
    assert "http://" not in text and "https://" not in text
    assert "<h1>Can I trust these explanations? loans &lt;&amp;&gt; &#x27;x&#x27;</h1>" in text
    assert f'<pre class="summary">{html.escape(r["summary"]["text"])}</pre>' in text
    write_html(r, images, tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text() == text


def test_the_sanity_row_and_the_paragraphs_of_what_was_not_run():
    r = report()
    images = {}
    text = page(r, images)
    for name, entry in r["sections"]["sanity"]["explainers"].items():
        v = entry["verdict"]
        word = '<span class="pass">PASS</span>' if v["passed"] else '<span class="fail">FAIL</span>'
        numbers = (v["delta"], v["similarity_seed"], v["similarity_randomised"], entry["random_logit"])
        cells = [name, *(f"{e['mean']:.3f} ± {e['ci95']:.3f}" for e in numbers)]
        cells[1] = f"{word} {cells[1]}"
        assert "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" in text
    assert "<p>No ensembles of 2: too few members.</p>" in text
    assert "<p>Not run: no permuted-label population given" in text and "<p>None: one explainer.</p>" in text
    assert "Against the ground truth" not in text and "<figure>" not in text
