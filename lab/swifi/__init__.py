# SPDX-License-Identifier: GPL-2.0
"""Software fault injection for the lab (Nooks §4.1, after Rio's injector).

faults.py     the generator: single-instruction faults computed from a .ko
inject.py     writing them into the running module: driver process or guest kernel
guestload.py  a trial's workload, run in the guest
campaign.py   trials in both worlds and their classification
report.py     tables, the headline figure and the plot
cli.py        python3 -m lab swifi / python3 -m lab.swifi
"""
