"""The commands of ``lorasent`` (:mod:`lorasent.cli` is the group that holds them): the
pipeline's stages (:mod:`lorasent.commands.stages`, the one command module a stage's deps
list), and apart from them the commands that use an adapter, the project's checks and
headline, the review of a change and the experiments."""
