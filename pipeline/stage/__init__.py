"""The stage contract, the floor above the ground (:mod:`pipeline.core`): what a data stage is
(:mod:`pipeline.stage.stage`) and the request/answer loop every LLM stage shares
(:mod:`pipeline.stage.llmstage`). The stages (:mod:`pipeline.stages`) build on it, and the engine
(:mod:`pipeline.engine`) runs them; nothing here imports either."""
