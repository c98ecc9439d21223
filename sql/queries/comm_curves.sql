-- Collective latency (p50, us), the time its models are fitted on (lat_us: the mean over iterations where stored, else p50) and bus bandwidth (GB/s) per message size, per platform, collective, world size and split kind.
-- Reads the aggregated rows (rank IS NULL) of completed runs; repeated measurements of a size are combined by median.
-- message size = max over ranks of max(bytes sent, bytes received) (the collective model's size).
SELECT platform, collective, world_size, split_kind, max_rank_bytes,
       count(*)                          AS n_rows,
       median(lat_p50_us)                AS lat_p50_us,
       median(coalesce(lat_mean_us, lat_p50_us)) AS lat_us,
       median(busbw_gbps)                AS busbw_gbps,
       median(algbw_gbps)                AS algbw_gbps,
       string_agg(DISTINCT source, ',' ORDER BY source) AS sources
FROM v_collective_measurements
WHERE rank IS NULL
GROUP BY platform, collective, world_size, split_kind, max_rank_bytes
ORDER BY platform, collective, world_size, split_kind, max_rank_bytes;
