"""Route-ahead prefetch for decode sessions: predictors that name the experts to stage ahead of a
layer (:mod:`.predictors`), the ``--prefetch`` text (:mod:`.spec`), the decode loop's side of staging
and landing (:mod:`.stage`), and what a predictor did in a turn — precision, recall, bytes read
ahead and never used (:mod:`.tally`)."""
from workbench.expert.prefetch.predictors import Predictor, make_predictor
from workbench.expert.prefetch.spec import PREFETCHERS, PrefetchSpec, check_prefetch, parse_prefetch
from workbench.expert.prefetch.stage import PrefetchStage
from workbench.expert.prefetch.tally import TALLY_KEYS, PrefetchTally, precision_recall, tally_fields, tally_line

__all__ = ["PREFETCHERS", "TALLY_KEYS", "Predictor", "PrefetchSpec", "PrefetchStage", "PrefetchTally", "check_prefetch",
           "make_predictor", "parse_prefetch", "precision_recall", "tally_fields", "tally_line"]
