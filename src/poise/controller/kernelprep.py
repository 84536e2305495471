"""The service's kernels, prepared once before the device is opened (no cycle ever compiles).

:func:`prepare_kernels` compiles (or loads from Numba's cache) what a run needs, the steps of
:func:`kernel_steps`, and hands the control step its stepper factory; :func:`kernels_cached`
says whether that will load rather than compile. The service
(:class:`~poise.controller.service.Controller`) calls them under its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poise.motion.options import MotionOptions
from poise.motion.reference import predicts
from poise.motion.step import compiled_factory, kernel_pack
from poise.motion.stepper import make_stepper

if TYPE_CHECKING:
    from poise.controller.service import Controller
    from poise.kernels.packed import PackedModel
    from poise.kernels.warmup import WarmUpProgress, WarmUpStep


def prepare_kernels(ctl: Controller, progress: WarmUpProgress | None = None) -> None:
    """:meth:`Controller.prepare_kernels <poise.controller.service.Controller.prepare_kernels>`:
    run :func:`kernel_steps` (``progress`` hears of each as it starts), mark the cache as
    holding this model family's kernels, give the step its stepper factory; once per
    controller (a second caller waits for the first)."""
    from poise.kernels.cache import mark_prepared
    from poise.kernels.warmup import cache_dir, run_steps

    with ctl._kernel_lock:
        if ctl._kernels_ready:
            return
        packed = kernel_pack(ctl.model, ctl.config.loop.compiled)
        report = run_steps(ctl.model.name, kernel_steps(ctl, packed), progress=progress,
                           cached=kernels_cached(ctl))
        mark_prepared(cache_dir(), kernel_key(ctl))
        ctl.step.stepper_factory = make_stepper if packed is None else \
            compiled_factory(ctl.model, packed)
        ctl._kernels_ready = True
    if packed is not None:
        ctl.announce("info", code="kernels_ready", seconds=round(report.seconds, 3),
                     text=report.summary())


def kernel_steps(ctl: Controller, packed: PackedModel | None) -> list[WarmUpStep]:
    """What :func:`prepare_kernels` compiles or loads: the timing statistics' percentiles
    (:meth:`TimingStats.summary`, which the status calls), then with compiled kernels
    (``packed``) the cycle's and the planner's (:func:`~poise.kernels.warmup.
    warm_up_steps`, the cycle only) and the simulated plant's
    (:class:`~poise.sim.compiled.CompiledPlant`) where plans predict the model's
    response or this controller starts its virtual device itself (which then finds them
    in the cache; one launched early, :mod:`poise.controller.realtime.boot`, compiles or loads
    its own meanwhile)."""
    todo: list[WarmUpStep] = [("timing percentiles", ctl.timing_stats.summary)]
    if packed is None:
        return todo
    from poise.kernels.warmup import warm_up_steps

    cfg = ctl.config.device
    simulator = cfg.port == "sim" and cfg.protocol == "poise" and ctl._launched is None
    # the step-by-step commit too where the balance controller may run (its first cycle
    # loaded it from the cache: 36 ms, an overrun of the dancer's 4 ms period)
    stepwise = ctl.step.balance is not None
    todo += warm_up_steps(packed, dynamics=simulator, stepwise=stepwise)
    if simulator or predicts(ctl.model, MotionOptions.from_config(ctl.config)):
        model = ctl.model

        # the plans' model predictions step its dynamics: loaded now, not while the
        # loop runs beside a target's planning (in this process: the GIL)
        def plant() -> None:
            from poise.sim.compiled import CompiledPlant

            CompiledPlant(model)

        todo.append(("simulated plant", plant))
    return todo


def kernels_cached(ctl: Controller) -> bool:
    """Whether :func:`prepare_kernels` will load from Numba's cache (this model family's
    kernels were prepared before from the same sources) rather than compile."""
    from poise.kernels.cache import prepared
    from poise.kernels.warmup import cache_dir

    return prepared(cache_dir(), kernel_key(ctl))


def kernel_key(ctl: Controller) -> str:
    """The cache mark's key: the model family with compiled kernels, else ``reference``."""
    from poise.kernels import has_kernels

    compiled = ctl.config.loop.compiled and has_kernels(ctl.model)
    return str(ctl.model.family) if compiled else "reference"


__all__ = ["kernel_key", "kernel_steps", "kernels_cached", "prepare_kernels"]
