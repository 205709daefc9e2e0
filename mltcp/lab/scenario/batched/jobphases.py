"""Where every job of every lane is in its iteration: the state machine the models share.

The models (:mod:`mltcp.lab.scenario.batched.dcqcn` here, in numpy; the fluid model's
compiled engine, :mod:`mltcp.lab.models.fluid_engine`, by the same rules) run the
same jobs: an iteration is one or more phases, each a compute step (plus the seeded jitter on the
first phase) and then the phase's bytes; a phase ends when all of the job's bytes of
it are delivered (barrier), and the last phase ends the iteration.  What differs
between the models is only how bytes move.  This mixin keeps the jobs' side in one
place, so both record iterations and phases by the same rules.

A class that uses it calls :meth:`_init_phases` and provides ``_clock()`` (the lanes'
current times, (L,)) and ``_recorder()`` (the object whose ``start``, ``comm_start``,
``comm_end``, ``end`` (L, J, I) and ``phase_start``, ``phase_end`` (L, J, I, P) arrays
take the records).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class PhasedBatch(Protocol):
    """What the jobs' side needs of a batch (:class:`mltcp.lab.scenario.batched.lanes.Batch`)."""

    iterations: np.ndarray        # (L, J) iterations per job
    start: np.ndarray             # (L, J) start offsets, s
    phase_compute: np.ndarray     # (L, J, P) compute before each phase, s
    phase_fraction: np.ndarray    # (L, J, P) share of the iteration's bytes per phase
    jitter: np.ndarray | None     # (L, J, I) extra compute per iteration, s


class JobPhases:
    """Per lane and job: running, iteration, phase, computing or communicating."""

    def _clock(self) -> np.ndarray:
        raise NotImplementedError

    def _recorder(self) -> Any:
        raise NotImplementedError

    def _init_phases(self, batch: PhasedBatch) -> None:
        n_lanes, n_jobs = batch.iterations.shape
        n_iter = max(int(batch.iterations.max(initial=0)), 1)
        self.n_phases = batch.phase_compute.shape[2]
        self.lane_idx = np.arange(n_lanes)[:, None].repeat(n_jobs, axis=1)
        self.job_idx = np.arange(n_jobs)[None, :].repeat(n_lanes, axis=0)
        self.running = batch.iterations > 0          # (L, J) job has iterations left
        self.it = np.zeros((n_lanes, n_jobs), dtype=int)
        self.phase = np.zeros((n_lanes, n_jobs), dtype=int)
        self.computing = self.running.copy()
        self.communicating = np.zeros((n_lanes, n_jobs), dtype=bool)
        self.jitter = (batch.jitter if batch.jitter is not None
                       else np.zeros((n_lanes, n_jobs, n_iter)))
        self.compute_end = np.where(self.running, batch.start + batch.phase_compute[:, :, 0]
                                    + self.jitter[:, :, 0], np.inf)
        self._record("start", self.running, batch.start)

    def _record(self, what: str, mask: np.ndarray, values: np.ndarray) -> None:
        """<what>[lane, job, current iteration] = values, where mask."""
        getattr(self._recorder(), what)[self.lane_idx[mask], self.job_idx[mask],
                                        self.it[mask]] = values[mask]

    def _record_phase(self, what: str, mask: np.ndarray) -> None:
        """<what>[lane, job, current iteration, current phase] = the lane's time."""
        li, ji = self.lane_idx[mask], self.job_idx[mask]
        getattr(self._recorder(), what)[li, ji, self.it[mask], self.phase[mask]] = \
            self._clock()[li]

    def _begin_phases(self, batch: PhasedBatch, due: np.ndarray, now: np.ndarray) -> np.ndarray:
        """The jobs in ``due`` finished computing: they communicate now.  Returns (L, J)
        the share of the iteration's bytes their current phase sends."""
        self.computing &= ~due
        self.communicating |= due
        self._record("comm_start", due & (self.phase == 0), np.broadcast_to(now, due.shape))
        self._record_phase("phase_start", due)
        return np.take_along_axis(batch.phase_fraction, self.phase[:, :, None], 2)[:, :, 0]

    def _end_phases(self, batch: PhasedBatch, finished: np.ndarray,
                    now: np.ndarray) -> np.ndarray:
        """The jobs in ``finished`` delivered their phase's bytes: the next phase, or
        the next iteration, begins with its compute (unless the job is done).  Returns
        (L, J) the jobs whose iteration ended."""
        self.communicating &= ~finished
        self._record_phase("phase_end", finished)
        last = finished & (self.phase == self.n_phases - 1)
        times = np.broadcast_to(now, last.shape)
        self._record("comm_end", last, times)
        self._record("end", last, times)
        self.it = self.it + last
        self.running &= ~(last & (self.it >= batch.iterations))
        nxt = finished & self.running                   # next phase, or next iteration
        self.phase = np.where(last, 0, np.where(finished, self.phase + 1, self.phase))
        self._record("start", nxt & last, times)
        comp = np.take_along_axis(batch.phase_compute, self.phase[:, :, None], 2)[:, :, 0]
        k = np.minimum(self.it, self.jitter.shape[2] - 1)[:, :, None]
        comp = comp + np.where(self.phase == 0, np.take_along_axis(self.jitter, k, 2)[:, :, 0],
                               0.0)
        self.compute_end = np.where(nxt, now + comp, self.compute_end)
        self.computing |= nxt
        return last
