"""Widget state and saved HTML of a default %%kernel cell on the real matmul and attention kernels (issue 16):

    PYTHONPATH=. python -m benchmarks.tools.viz_payload
"""
import json

from ipywidgets.embed import dependency_state, embed_data

import kernellab.viz as kv
from kernellab.viz.magic import DEFAULT_VIEWS, parse_views
from tests.viz import real_kernels as R

for name in ("matmul", "attention"):
    ck = getattr(R, name)()
    tab = kv.show(ck, views=tuple(v for v in parse_views(DEFAULT_VIEWS) if v != "perf"))
    state = embed_data(views=[tab], state=dependency_state([tab]))["manager_state"]
    html = tab._repr_mimebundle_()["text/html"]
    per = {}
    for t, c in zip(tab.titles, tab.children):
        per[t] = (len(json.dumps(dependency_state([c]))) // 1024,
                  len(c.static_html()) // 1024 if hasattr(c, "static_html") else 0)
    print(f"{name}: state {len(json.dumps(state))/1e6:.2f} MB, saved html {len(html)/1e6:.2f} MB; "
          f"per view (state KiB, html KiB): {per}")
    code = tab.children[-1]
    if hasattr(code, "tabs"):
        print("   code tabs KiB:", [len(getattr(c, "value", "")) // 1024 for c in code.tabs.children])
