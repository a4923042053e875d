# SPDX-License-Identifier: Apache-2.0
# devctl's bash completion: client/devctl/devctl.bash, installed where
# bash-completion loads it on demand (make install), tested by `make check`
# (tests/completion.sh, as the program test_completion).
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions

$(BUILD)/tests/test_completion: tests/completion.sh client/devctl/devctl.bash $(BUILD)/devctl $(BUILD)/devqd
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec sh tests/completion.sh "$$@"\n' > $@
	$(Q)chmod +x $@

.PHONY: install-completion
install: install-completion
## install devctl's bash completion into BASHCOMPDIR
install-completion:
	$(INSTALL) -d $(DESTDIR)$(BASHCOMPDIR)
	$(INSTALL) -m 0644 client/devctl/devctl.bash $(DESTDIR)$(BASHCOMPDIR)/devctl
