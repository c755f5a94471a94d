"""The SSH transport to a board: reaching it, the session (paramiko or OpenSSH's ``ssh``), bounded commands,
uploads, Ctrl-C. Exports (by module): ``connection.ParamikoSession``, ``sshboard.OpenSshSession``."""
