-- 0002: a prediction's model selection as columns. Until now it was one text in predictions.model_selection,
-- '<--models spec>/<cache state>/<digest>' with '/comm-shares-core' appended when the core rule applied, parsed back
-- with LIKE. Existing rows are converted; model_selection keeps the text of rows written before this migration
-- (DuckDB cannot drop a column of a table that other tables reference) and is no longer written.

ALTER TABLE predictions ADD COLUMN selection_spec VARCHAR;        -- --models as given: an alias (champion, latest) or name:version,...
ALTER TABLE predictions ADD COLUMN selection_cache_state VARCHAR; -- warm, cold, device, blend, or default (per platform kind)
ALTER TABLE predictions ADD COLUMN selection_digest VARCHAR;      -- first 8 hex of sha256 over the sorted name:version list it selected
ALTER TABLE predictions ADD COLUMN comm_shares_core BOOLEAN;      -- TRUE when collectives were charged to their rank's core too

UPDATE predictions
SET selection_spec        = split_part(model_selection, '/', 1),
    selection_cache_state = split_part(model_selection, '/', 2),
    selection_digest      = split_part(model_selection, '/', 3),
    comm_shares_core      = split_part(model_selection, '/', 4) = 'comm-shares-core'
WHERE model_selection IS NOT NULL;
