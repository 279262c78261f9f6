# IPython settings of every sandbox kernel (installed in <venv>/etc/ipython).
c = get_config()  # noqa: F821

# jedi's first completion inspects the kernel's loaded modules through thousands of file-system
# calls: 20-80 s under gVisor, where each costs far more than on the host. IPython's own
# completer answers in milliseconds. A notebook can still opt in:
#     %config IPCompleter.use_jedi = True
c.IPCompleter.use_jedi = False
