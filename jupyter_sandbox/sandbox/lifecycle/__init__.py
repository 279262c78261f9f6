"""How long sandboxes live and who holds them: context ids and their locks, the warm pool and its
filler, quotas and usage, the idle culler, the reaper of what crashes left behind, and the
lifeline that removes an unnamed kernel's sandbox once its kernel process is gone.
"""
