app_name = "procedures"

urlpatterns = []
