"""The papers this project reproduces or builds on, under short keys.

Code, configs, the command line and the docs cite a paper by its key (``cassini``,
``vclos``, ``ada-srsf``, ``deepshare-rl`` ...) and a section, e.g. "vclos §9.2"; this
is the one list of what each key means.  ``document`` names the source text kept
beside the project (``shared/seeds/`` in the workspace, where the files are numbered:
``001_...`` is deepshare-rl's), so that a number quoted in the code can be found.
``docs/references.md`` is rendered from this list (:func:`markdown`) and a test keeps
the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    key: str
    title: str
    authors: tuple[str, ...]
    venue: str
    year: int
    document: str          # the source text's file name ("" where none is kept)
    what: str              # what this project takes from it
    link: str = ""

    def citation(self) -> str:
        """Authors, title (a markdown link where there is one), venue, year: one line."""
        title = f"[{self.title}]({self.link})" if self.link else self.title
        return f"{', '.join(self.authors)}. {title}. {self.venue}, {self.year}."


REFERENCES: tuple[Reference, ...] = (
    Reference(
        "mltcp", "MLTCP: A Distributed Technique to Approximate Centralized Flow "
        "Scheduling For Machine Learning",
        ("Sudarsanan Rajasekaran", "Sanjoli Narang", "Anton A. Zabreyko", "Manya Ghobadi"),
        "ACM HotNets '24 (23rd ACM Workshop on Hot Topics in Networks)", 2024, "",
        "the idea itself: F(bytes_ratio) = intercept + slope x bytes_ratio scaling window "
        "growth, and the analysis of the gap between two jobs' communication starts "
        "(summarised in the thesis, chapter 1)",
        "https://doi.org/10.1145/3696348.3696878"),
    Reference(
        "thesis", "Optimizing Networked Systems for Artificial Intelligence Training "
        "Workloads", ("Sudarsanan Rajasekaran",),
        "PhD thesis, Massachusetts Institute of Technology (advisor Manya Ghobadi)", 2025,
        "000_7865ae5bce800cf3.txt",
        "interleaving (chapter 3), Cassini (chapter 4, with its evaluation in §4.5: the "
        "cassini-poisson cluster setup), MLTCP (chapter 1); the title is the thesis "
        "defence's (the extracted text starts at the abstract)",
        "https://hdl.handle.net/1721.1/158918"),
    Reference(
        "cassini", "Cassini: Network-Aware Job Scheduling in Machine Learning Clusters",
        ("Sudarsanan Rajasekaran", "Manya Ghobadi", "Aditya Akella"),
        "USENIX NSDI '24", 2024, "000_7865ae5bce800cf3.txt",
        "the centralized baseline: the geometric abstraction, unified circles, the "
        "compatibility score, the affinity graph's time-shifts (Table 4.1, Algorithms "
        "1-2); read in the thesis's chapter 4, whose section numbers the code cites"),
    Reference(
        "cassini-talk", "Cassini: Network-Aware Job Scheduling in Machine Learning "
        "Clusters (slides of a reading-group talk, in Chinese)", ("孙铂钛 (Sun Botai)",),
        "talk slides", 2024, "002_08f8e7c012caa380.txt",
        "how Cassini augments Themis (the cassini cluster scheduler's candidates)"),
    Reference(
        "deepshare-rl", "Network Contention-Aware Cluster Scheduling with Reinforcement "
        "Learning", ("Junyeol Ryu", "Jeongyoon Eo"), "arXiv:2310.20209", 2023,
        "001_cfefd5108e374ccb.txt",
        "contention sensitivity (Eq. 1, Fig. 1), the RL scheduler (state, actions, "
        "Eq. 2 reward, RL-base and RL-Hybrid), its cluster and four traces (§VI)",
        "https://arxiv.org/abs/2310.20209"),
    Reference(
        "vclos", "Isolated Scheduling for Distributed Training Tasks in GPU Clusters",
        ("Xinchi Han", "Weihao Jiang", "Peirui Cao", "Qinwei Yang", "Yunzhuo Liu",
         "Shuyao Qi", "Shengkai Lin", "Shizhen Zhao"), "arXiv:2308.05692", 2023,
        "003_4c01d47e34a84381.txt",
        "vClos and OCS-vClos, the routing baselines (ECMP, balanced ECMP, source "
        "routing) and the CLUSTER512 experiment (§9)",
        "https://arxiv.org/abs/2308.05692"),
    Reference(
        "ada-srsf", "Communication Contention Aware Scheduling of Multiple Deep Learning "
        "Training Jobs", ("Qiang Wang", "Shaohuai Shi", "Canhui Wang", "Xiaowen Chu"),
        "arXiv:2002.10105", 2020, "004_0a96367fb60817d1.txt",
        "LWF-kappa placement, AdaDUAL's communication order, Ada-SRSF and SRSF(n), and "
        "the 64-GPU experiment (§V)",
        "https://arxiv.org/abs/2002.10105"),
)

BY_KEY = {r.key: r for r in REFERENCES}


def markdown() -> str:
    """docs/references.md."""
    lines = ["# References", "",
             "The papers this project reproduces or builds on, and the short key by which "
             "code, configs, the command line and these docs cite each one (\"vclos §9.2\" "
             "is section 9.2 of the vClos paper).  Rendered from "
             "`mltcp/lab/common/references.py` (the one list; `tests/test_references.py` "
             "keeps this page equal to it).  *Document* is the source text kept beside the "
             "project (`shared/seeds/` in the workspace).", "",
             "| key | reference | document | what this project takes from it |",
             "|---|---|---|---|"]
    for r in REFERENCES:
        lines.append(f"| `{r.key}` | {r.citation()} | "
                     f"{f'`{r.document}`' if r.document else '-'} "
                     f"| {r.what} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":       # python -m mltcp.lab.common.references > docs/references.md
    print(markdown(), end="")
