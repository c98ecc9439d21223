-- Collection runs per kind, platform and status, with the latest start.
SELECT kind, platform, status, count(*) AS runs, max(started_at) AS latest
FROM collection_runs
GROUP BY kind, platform, status
ORDER BY kind, platform, status;
