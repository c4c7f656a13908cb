"""The release pipeline: check -> bump -> prefetch -> render -> build
-> verify -> publish -> promote, recorded per run (docs/pipeline.md)."""

from nodeforge.pipeline.run import DEFAULT_RUNS_DIR, Pipeline, PipelineFailed, Plan  # noqa: F401
from nodeforge.pipeline.stages import PipelineConfig  # noqa: F401
