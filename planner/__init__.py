"""Analytical transformer training planner (Subramanian et al. 2024, arXiv 2410.00273, done again and vectorised).

Per layer and pass: FLOPs, HBM traffic, communication volume and type, memory held; a roofline per op and a two-tier
ring network turn them into time; a vectorised search over the parallel configurations finds the fastest that fit.
Times are seconds, sizes bytes, rates per second unless a name says otherwise.
"""
