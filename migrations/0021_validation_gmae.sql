-- 0021: each registered version's GMAE on a validation part of its training side, and how many configurations that
-- part held (fitters/selection.py). They choose a model name's champion, so the test split stays unseen by every choice
-- and the champion's test GMAE is a held-out figure: the lowest validation GMAE, or with too few validation
-- configurations the analytic family. NULL for versions registered before 0021 (their champions were chosen by test GMAE, and a
-- name with such a version among its candidates still is) and where nothing is chosen among (collectives, backward
-- GEMMs).

ALTER TABLE model_versions ADD COLUMN validation_gmae DOUBLE; -- GMAE on the training side's validation rows (fraction); NULL before 0021
ALTER TABLE model_versions ADD COLUMN validation_configs INTEGER; -- distinct configurations in that validation part; NULL before 0021
