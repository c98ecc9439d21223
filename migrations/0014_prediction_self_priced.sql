-- 0014: how much of a model-mode prediction the trace being predicted priced itself. An op no model, roofline or
-- overhead table prices keeps its traced time: that is replay, not a model. self_priced_share is the share of the
-- predicted work (µs summed over ranks and streams) such ops make up; a prediction mostly self-priced (> 0.5) is
-- left out of model error statistics (v_prediction_errors.self_priced). Rows written before: computed from their
-- unmodelled list (its 'trace' fallbacks) where every entry names its fallback, else NULL (not known).

ALTER TABLE predictions ADD COLUMN self_priced_share DOUBLE;  -- model mode: share of predicted work priced by the trace's own durations (0..1)

UPDATE predictions SET self_priced_share = (
    SELECT CASE WHEN count(u->>'fallback') = count(*)
                THEN coalesce(sum(CAST(u->>'predicted_share' AS DOUBLE)) FILTER (WHERE u->>'fallback' = 'trace'), 0)
           END
    FROM (SELECT unnest(CAST(predictions.unmodelled AS JSON[])) AS u))
WHERE mode = 'model' AND unmodelled IS NOT NULL;
